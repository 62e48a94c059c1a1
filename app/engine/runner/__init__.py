"""Running sessions: the loop above the tools and the pipeline.

Start here:
  session_runner.py  one session's loop and nothing else: ask the agent, dispatch its calls
                     (app/engine/tools/table.py), tool boundaries, deliver steering
  pause.py           a paused runner's wait, during which the bank's auto-ask may ask
  manager.py         starts, wakes and stops runners; startup recovery

Below it in the engine: the candidate pipeline (app/engine/pipeline.py, handed to tool
handlers) and RunnerState (app/engine/runner_state.py, the one owner of runner_state)."""
