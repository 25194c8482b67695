#!/usr/bin/env python3
"""Loads a Llama that `trainctl export` wrote with transformers' LlamaForCausalLM and
prints, as one JSON line, what //tests:llama_cluster_test compares with the engine:
  {"loss": <perplexity-task loss of TEXT at the export's context, overlap 8>,
   "warnings": [<every warning transformers logged while loading>]}
Byte tokens, as the engine's byte tokenizer. Exit 3 when transformers is not installed.

  python3 tests/parity/llama/check_export.py EXPORT_DIR TEXT_FILE
"""
import json
import logging
import pathlib
import sys
import warnings

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "evaluation"))

try:
    import transformers
    from transformers import LlamaForCausalLM
except ImportError:
    print("transformers is not installed", file=sys.stderr)
    sys.exit(3)
import eval_reference  # noqa: E402
from llama_reference import losses_of  # noqa: E402


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def main():
    export_dir, text_file = sys.argv[1], sys.argv[2]
    handler = Collect()
    transformers.logging.get_logger().addHandler(handler)
    transformers.logging.disable_progress_bar()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = LlamaForCausalLM.from_pretrained(export_dir, attn_implementation="eager")
    model = model.double().eval()
    # The windows of the engine's --evaluate=perplexity at this model's context.
    eval_reference.SEQ = model.config.max_position_embeddings
    eval_reference.OVERLAP = 8
    text = pathlib.Path(text_file).read_text()
    result = eval_reference.perplexity(None, None, text, losses_of(model))
    print(json.dumps({"loss": result["loss"], "scored_tokens": result["scored_tokens"],
                      "warnings": handler.messages + [str(w.message) for w in caught]}))


if __name__ == "__main__":
    main()
