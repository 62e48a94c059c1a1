"""Running sessions: the loop above the tools, the pipeline below them.

Start here:
  session_runner.py  one session's loop and nothing else: ask the agent, dispatch its calls
                     (app/tools/table.py), tool boundaries, deliver steering
  pipeline.py        the candidate pipeline: store -> compile -> device queue -> harness ->
                     judge -> re-time -> verdict -> goal and triggers (handed to tool handlers)
  state.py           RunnerState, the one owner of a session's runner_state (load / save)
  pause.py           a paused runner's wait, during which the bank's auto-ask may ask
  states.py          the session state machine
  manager.py         starts, wakes and stops runners; startup recovery
  devices.py         the device queue (one evaluation per GPU at a time)
  evaluation.py      the harness calls, evaluation settings, the contract text
"""
