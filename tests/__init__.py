"""The kit's own tests, a package tree (an ``__init__.py`` in every folder).

Test helpers are imported by their full dotted name (``from tests.chaos._chaos_support
import start_session``); pytest puts the checkout root on ``sys.path`` for that
(``pythonpath`` in ``[tool.pytest.ini_options]``).
"""
