"""Deployed campaigns: a queue library's own worker processes, at its documented
settings, under the kit's nemesis, judged from what the kit's probe handler journals.

- :mod:`.probe`: the probe's journal (format, writer, reader);
- :mod:`.system`: what a deployed system declares (how to run, enqueue, read back; its
  promises; its settings profiles) and how one is found (``rdq.systems`` entry points);
- :mod:`.faults`: the nemesis's faults as the checker reads them;
- :mod:`.verdicts`: the checker over executions, faults, accepted jobs and final states.

The contract's section 9 (``contract.md#9-deployed-systems``) is the reference.
"""
