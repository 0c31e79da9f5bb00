"""Reads a checkpoint's trainer_state.json with transformers' own TrainerState.load_from_json
(the oracle for Odyssey's HF-compatible trainer state) and prints what it holds as JSON:
global_step, max_steps, epoch, the log history. Exit 1 with the exception when transformers
refuses the file.

    python hf_trainer_state_oracle.py CHECKPOINT_DIR
"""
import json
import os
import sys

from transformers.trainer_callback import TrainerState


def main() -> int:
    path = os.path.join(sys.argv[1], "trainer_state.json")
    try:
        state = TrainerState.load_from_json(path)
    except Exception as e:  # the oracle's verdict, reported as such
        print(f"TrainerState.load_from_json({path}) raised {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps({
        "global_step": state.global_step,
        "max_steps": state.max_steps,
        "epoch": state.epoch,
        "logging_steps": state.logging_steps,
        "save_steps": state.save_steps,
        "num_input_tokens_seen": state.num_input_tokens_seen,
        "log_history": state.log_history,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
