"""Deployed campaigns: a queue library's own worker processes, at its documented
settings, under the kit's nemesis, judged from what the kit's probe handler journals.

- :mod:`.probe`: the probe's journal (format, writer, reader);
- :mod:`.system`: what a deployed system declares (how to run, enqueue, read back; its
  promises; its settings profiles) and how one is found (``rdq.systems`` entry points);
- :mod:`.faults`: the nemesis's faults as the checker reads them;
- :mod:`.verdicts`: the checker over executions, faults, accepted jobs and final states;
- :mod:`.scenario` and :mod:`.plan`: what a campaign runs, and the plan a seed draws from
  it for one system and server;
- :mod:`.fleet`: the system's workers as supervised process trees;
- :mod:`.places`, :mod:`.local_places`, :mod:`.remote_places`: where they run (this
  machine, or the hosts of an SSH fleet) and what needs more than a signal there (a
  partition, a clock skew);
- :mod:`.nemesis`: the plan's faults done, as spans;
- :mod:`.campaign`, :mod:`.result`, :mod:`.report`: one campaign, what it recorded, its
  report folder; :mod:`.cli`: ``rdq-chaos deployed``;
- :mod:`.control`, :mod:`.core_worker`: rdq's own worker loop deployed as a system, on
  any kit backend.

The contract's section 9 (``contract.md#9-deployed-systems``) is the reference.
"""
