"""``KitContainer.pause`` asks again when the cgroup-v1 freezer cannot freeze a busy
container in time (moby/moby#48205), and only then; any other error is raised at once."""

from __future__ import annotations

import threading

import pytest

docker_errors = pytest.importorskip("docker.errors")

from rdq_compliance.provision import kit_container  # noqa: E402
from rdq_compliance.provision.kit_container import FREEZE_TRIES, KitContainer  # noqa: E402

FREEZE_FAILED = (
    "500 Server Error: Cannot pause container abc: OCI runtime pause failed: unable to "
    "freeze: unknown"
)


class _Container:
    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.calls = 0

    def pause(self) -> None:
        self.calls += 1
        if self.errors:
            raise docker_errors.APIError(self.errors.pop(0))


def _kit(container: _Container, monkeypatch: pytest.MonkeyPatch) -> KitContainer:
    monkeypatch.setattr(kit_container.time, "sleep", lambda _s: None)
    kit = object.__new__(KitContainer)
    kit._lock = threading.Lock()  # type: ignore[attr-defined]
    kit.container = container  # type: ignore[attr-defined]
    return kit


def test_a_freeze_that_failed_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    container = _Container([FREEZE_FAILED, FREEZE_FAILED])
    _kit(container, monkeypatch).pause()
    assert container.calls == 3


def test_a_freeze_that_keeps_failing_is_raised_after_the_last_try(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    container = _Container([FREEZE_FAILED] * FREEZE_TRIES)
    with pytest.raises(docker_errors.APIError, match="unable to freeze"):
        _kit(container, monkeypatch).pause()
    assert container.calls == FREEZE_TRIES


def test_another_error_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    container = _Container(["409 Client Error: Container abc is not running"])
    with pytest.raises(docker_errors.APIError, match="not running"):
        _kit(container, monkeypatch).pause()
    assert container.calls == 1
