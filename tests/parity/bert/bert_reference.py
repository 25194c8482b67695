#!/usr/bin/env python3
"""transformers' BERT as the reference for the engine's BERT family (issue 35), for
//tests:bert_hf_parity_test.

  bert_reference.py make OUT
      Writes two small BERTs in transformers' format: OUT/pre (MegatronBertForPreTraining,
      Megatron's LayerNorm before each sub-layer, the engine's model.layernorm_placement
      LAYERNORM_PLACEMENT_PRE) and OUT/post (BertForPreTraining, the original). Both: 2
      layers, hidden 64, 4 heads, intermediate 96, the shipped WordPiece vocabulary's 2,048
      entries, 40 positions, exact GeLU, layer_norm_eps 1e-12, no dropout; transformers'
      initialisation, then every weight moved at a larger scale so that every path matters.
      Also OUT/pre-choice (MegatronBertForMultipleChoice) and OUT/post-choice
      (BertForMultipleChoice): the same sizes with 72 positions (RACE's sequences are
      longer), for the multiple-choice head.
  bert_reference.py loss MODEL_DIR BATCH_JSON
      Loads MODEL_DIR (refusing missing or unexpected tensors, and any warning transformers
      logs while loading) and prints, as JSON, what it
      computes in float64 for the batch (tokens, token_types, lengths, labels with -1 where
      nothing is masked, sentence_order): the pretraining loss (the masked-LM mean over the
      batch's masked positions plus the sentence-order mean over its sequences), both parts,
      and the gradient norm of that loss over every parameter.
  bert_reference.py choice_loss MODEL_DIR BATCH_JSON
      The same for a multiple-choice model on a batch of questions (tokens, token_types,
      lengths of each question's four option sequences in turn, answers): the mean
      cross-entropy over the questions, the share answered right, the gradient norm.
  bert_reference.py race_eval MODEL_DIR RACE_JSONL VOCAB_TXT SEQ_LENGTH
      A multiple-choice model on every question of a RACE-format file, with sequences built
      here from the format's rule (data/race_dataset.h: [CLS] question-with-option [SEP]
      passage [SEP], the passage cut first) and `tokenizers`' WordPiece over VOCAB_TXT: the
      questions, the mean cross-entropy and the share answered right, as `trainctl eval
      --task race` reports them, and the questions whose answer's score is within 1e-4 of
      the best other option's (which float32 rounding may decide either way).

Exit status 3 when torch or transformers is missing (the test says so and skips).
"""
import json
import logging
import pathlib
import sys

try:
    import torch
    from transformers import (AutoModelForMultipleChoice, AutoModelForPreTraining, BertConfig,
                              BertForMultipleChoice, BertForPreTraining, MegatronBertConfig,
                              MegatronBertForMultipleChoice, MegatronBertForPreTraining)
except ImportError as error:  # pragma: no cover
    print(f"needs torch and transformers: {error}", file=sys.stderr)
    sys.exit(3)

SIZES = dict(vocab_size=2048, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=96, max_position_embeddings=40, type_vocab_size=2,
             hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, pad_token_id=None)


def make(out):
    torch.manual_seed(35)
    for name, model_class, config_class in (("pre", MegatronBertForPreTraining, MegatronBertConfig),
                                            ("post", BertForPreTraining, BertConfig)):
        model = model_class(config_class(**SIZES))
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.1)
        model.save_pretrained(pathlib.Path(out) / name)
    for name, model_class, config_class in (
            ("pre-choice", MegatronBertForMultipleChoice, MegatronBertConfig),
            ("post-choice", BertForMultipleChoice, BertConfig)):
        model = model_class(config_class(**dict(SIZES, max_position_embeddings=72)))
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.1)
        model.save_pretrained(pathlib.Path(out) / name)


class Warnings(logging.Handler):
    """Collects what transformers logs at WARNING or above while a model loads."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def load(auto_class, model_dir):
    """The model in float64, refusing missing or unexpected tensors and any warning."""
    warnings = Warnings()
    logger = logging.getLogger("transformers")
    logger.addHandler(warnings)
    model, info = auto_class.from_pretrained(model_dir, output_loading_info=True)
    logger.removeHandler(warnings)
    problems = {k: v for k, v in info.items() if v}
    if problems or warnings.records:
        print(f"{model_dir}: transformers reports {problems} {warnings.records}", file=sys.stderr)
        sys.exit(4)
    return model.double().eval()


def gradient_norm(model):
    return torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters() if p.grad is not None))


def choice_loss(model_dir, batch_json):
    model = load(AutoModelForMultipleChoice, model_dir)
    batch = json.loads(pathlib.Path(batch_json).read_text())
    tokens = torch.tensor(batch["tokens"])
    seq = tokens.shape[1]
    lengths = torch.tensor(batch["lengths"])
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    answers = torch.tensor(batch["answers"])
    questions = answers.shape[0]
    out = model(input_ids=tokens.reshape(questions, 4, seq),
                token_type_ids=torch.tensor(batch["token_types"]).reshape(questions, 4, seq),
                attention_mask=mask.reshape(questions, 4, seq), labels=answers)
    out.loss.backward()
    right = (out.logits.argmax(dim=1) == answers).double().mean()
    print(json.dumps({"loss": out.loss.item(), "accuracy": right.item(),
                      "grad_norm": gradient_norm(model).item()}))


def race_eval(model_dir, race_jsonl, vocab_txt, seq_length):
    from tokenizers import BertWordPieceTokenizer
    tokenizer = BertWordPieceTokenizer(vocab_txt, lowercase=True)
    vocab = tokenizer.get_vocab()
    cls, sep, pad = vocab["[CLS]"], vocab["[SEP]"], vocab["[PAD]"]

    def ids(text):
        return tokenizer.encode(text, add_special_tokens=False).ids

    model = load(AutoModelForMultipleChoice, model_dir)
    total, right, questions, near_ties = 0.0, 0, 0, 0
    for line in pathlib.Path(race_jsonl).read_text().splitlines():
        if not line.strip():
            continue
        passage = json.loads(line)
        article = ids(passage["article"])
        for question, options, answer in zip(passage["questions"], passage["options"],
                                             passage["answers"]):
            tokens, types, masks = [], [], []
            for option in options:
                qa = question.replace("_", option, 1) if "_" in question else question + " " + option
                qa = ids(qa)[:seq_length - 3]
                text = article[:seq_length - 3 - len(qa)]
                sequence = [cls] + qa + [sep] + text + [sep]
                tokens.append(sequence + [pad] * (seq_length - len(sequence)))
                types.append([0] * (len(qa) + 2) + [1] * (len(text) + 1) +
                             [0] * (seq_length - len(sequence)))
                masks.append([1] * len(sequence) + [0] * (seq_length - len(sequence)))
            label = torch.tensor(["ABCD".index(answer)])
            with torch.no_grad():
                out = model(input_ids=torch.tensor([tokens]), token_type_ids=torch.tensor([types]),
                            attention_mask=torch.tensor([masks]), labels=label)
            total += out.loss.item()
            scores = out.logits[0]
            right += int(scores[label.item()] >= scores.max())
            # Whether fp32 rounding could decide this question the other way.
            others = torch.cat([scores[:label.item()], scores[label.item() + 1:]])
            near_ties += int(abs(scores[label.item()] - others.max()) < 1e-4)
            questions += 1
    print(json.dumps({"questions": questions, "loss": total / questions,
                      "accuracy": right / questions, "near_ties": near_ties}))


def loss(model_dir, batch_json):
    model = load(AutoModelForPreTraining, model_dir)
    batch = json.loads(pathlib.Path(batch_json).read_text())
    tokens = torch.tensor(batch["tokens"])
    seq = tokens.shape[1]
    lengths = torch.tensor(batch["lengths"])
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    labels = torch.tensor(batch["labels"])
    labels = torch.where(labels < 0, torch.full_like(labels, -100), labels)
    order = torch.tensor(batch["sentence_order"])
    out = model(input_ids=tokens, token_type_ids=torch.tensor(batch["token_types"]),
                attention_mask=mask)
    vocab = out.prediction_logits.shape[-1]
    mlm = torch.nn.functional.cross_entropy(out.prediction_logits.reshape(-1, vocab),
                                            labels.reshape(-1), ignore_index=-100)
    sop = torch.nn.functional.cross_entropy(out.seq_relationship_logits, order)
    total = mlm + sop
    total.backward()
    print(json.dumps({"loss": total.item(), "mlm_loss": mlm.item(), "sop_loss": sop.item(),
                      "grad_norm": gradient_norm(model).item()}))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "loss":
        loss(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "choice_loss":
        choice_loss(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 6 and sys.argv[1] == "race_eval":
        race_eval(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
