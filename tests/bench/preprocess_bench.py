#!/usr/bin/env python3
"""`preprocess` on a synthetic corpus with planted near-duplicates (issue 19): throughput,
peak memory, and recall/precision of the deduplication, beside datatrove's and text-dedup's
MinHash deduplication on the same JSONL where they are installed (pip install datatrove
text-dedup; each given --other-timeout seconds).

The corpus: documents of 200-700 words drawn from a Zipf-distributed vocabulary of 50,000
made-up words (distinct documents share almost no 5-word shingles), plus planted copies:
5% of documents get a near-duplicate later in the file (1-3% of their words replaced;
the exact Jaccard similarity of 5-word shingles is computed for each pair) and 1% an exact
copy. Recall: planted pairs at Jaccard >= 0.8 with either document dropped; precision:
distinct documents (in no planted pair) that were kept.

  bazel build //data:preprocess && python3 tools/fetch_gpt2_files.py
  python3 tests/bench/preprocess_bench.py --mb 1000 [--datatrove-mb 100] [--other-timeout 1800]
"""
import argparse
import json
import os
import pathlib
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT2 = pathlib.Path.home() / ".cache/mtrain/gpt2"


def make_corpus(path, megabytes, seed=19):
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(50000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    cumulative, total = [], 0.0
    for w in weights:
        total += w
        cumulative.append(total)
    planted = []  # (copy index, original index, kind)
    pending = []  # (due index, text, original index, kind)
    index, size = 0, 0
    with open(path, "w") as out:
        while size < megabytes * 1e6:
            due = [p for p in pending if p[0] <= index]
            if due:
                pending.remove(due[0])
                _, text, original, kind = due[0]
                planted.append((index, original, kind))
            else:
                words = rng.choices(vocab, cum_weights=cumulative, k=rng.randint(200, 700))
                text = " ".join(words)
                r = rng.random()
                if r < 0.05:
                    edited = list(words)
                    for _ in range(max(1, int(len(words) * rng.uniform(0.01, 0.03)))):
                        edited[rng.randrange(len(edited))] = rng.choice(vocab)
                    pending.append((index + rng.randint(1, 2000), " ".join(edited), index, "near"))
                elif r < 0.06:
                    pending.append((index + rng.randint(1, 2000), text, index, "exact"))
            line = json.dumps({"id": index, "text": text}) + "\n"
            out.write(line)
            size += len(line)
            index += 1
    return index, planted


def shingles(text, n=5):
    words = text.lower().split()
    return {" ".join(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def jaccards(path, planted):
    wanted = {c for c, o, k in planted} | {o for c, o, k in planted}
    texts = {}
    with open(path) as f:
        for i, line in enumerate(f):
            if i in wanted:
                texts[i] = json.loads(line)["text"]
    out = {}
    for copy, original, kind in planted:
        a, b = shingles(texts[copy]), shingles(texts[original])
        out[copy] = len(a & b) / len(a | b)
    return out


def timed(argv, timeout=None, **kwargs):
    """Runs argv; returns (seconds, peak RSS MiB of the child, stdout). A timeout raises
    subprocess.TimeoutExpired."""
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # A session of its own, so a timeout stops the tool's worker processes too.
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, **kwargs)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    result = subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
    if result.returncode != 0:
        sys.exit(f"{argv[0]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before) / 1024, result.stdout


def score(documents, planted, similar, dropped):
    """Recall: planted pairs at J >= 0.8 of which either document was dropped (a tool may
    keep the copy and drop the original: both remove the duplication). Precision: the
    distinct documents (in no planted pair) that were kept."""
    in_pairs = {c for c, o, k in planted} | {o for c, o, k in planted}
    high = [(c, o) for c, o, k in planted if similar[c] >= 0.8]
    recall = sum(1 for c, o in high if c in dropped or o in dropped) / max(1, len(high))
    distinct = [i for i in range(documents) if i not in in_pairs]
    precision = sum(1 for i in distinct if i not in dropped) / max(1, len(distinct))
    return len(high), recall, precision


def run_ours(corpus, tmp, workers):
    log = pathlib.Path(tmp, "dropped.tsv")
    seconds, peak, stdout = timed([
        str(ROOT / "bazel-bin/data/preprocess"), f"--input={corpus}",
        f"--output-prefix={tmp}/ours", f"--vocab-file={GPT2}/vocab.json",
        f"--merge-file={GPT2}/merges.txt", "--append-eod", f"--workers={workers}",
        "--min-tokens=0", f"--dropped-log={log}", "--progress=false"])
    dropped = {int(line.split("\t")[0]) for line in log.read_text().splitlines()}
    return seconds, peak, stdout, dropped


DATATROVE = r'''
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import MinhashDedupSignature, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
corpus, work, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3])
config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=9)
reader = lambda: JsonlReader(corpus.rsplit("/", 1)[0], glob_pattern=corpus.rsplit("/", 1)[1], id_key="id")
LocalPipelineExecutor([reader(), MinhashDedupSignature(output_folder=f"{work}/sig", config=config)], tasks=tasks, workers=tasks, logging_dir=f"{work}/l1").run()
LocalPipelineExecutor([MinhashDedupBuckets(input_folder=f"{work}/sig", output_folder=f"{work}/buckets", config=config)], tasks=config.num_buckets, workers=tasks, logging_dir=f"{work}/l2").run()
LocalPipelineExecutor([MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove", config=config)], tasks=1, logging_dir=f"{work}/l3").run()
LocalPipelineExecutor([reader(), MinhashDedupFilter(input_folder=f"{work}/remove"), JsonlWriter(f"{work}/kept", compression=None)], tasks=tasks, workers=tasks, logging_dir=f"{work}/l4").run()
'''


def run_datatrove(corpus, tmp, workers, documents, timeout):
    work = pathlib.Path(tmp, "datatrove")
    script = pathlib.Path(tmp, "datatrove_dedup.py")
    script.write_text(DATATROVE)
    seconds, peak, _ = timed([sys.executable, str(script), str(corpus), str(work), str(workers)],
                             timeout=timeout)
    kept = set()
    for f in (work / "kept").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            kept.add(int(json.loads(line)["id"]))
    return seconds, peak, set(range(documents)) - kept


def run_text_dedup(corpus, tmp, workers, documents, timeout):
    """text-dedup's MinHash (datasets-based) with the same 5-grams and 14 bands x 9 rows."""
    out = pathlib.Path(tmp, "text-dedup")
    seconds, peak, _ = timed(
        [sys.executable, "-m", "text_dedup.minhash", "--path", "json", "--data_files", str(corpus),
         "--split", "train", "--cache_dir", str(pathlib.Path(tmp, "hf-cache")), "--output",
         str(out), "--column", "text", "--ngram", "5", "--num_perm", "126", "--b", "14", "--r",
         "9", "--min_length", "0", "--num_proc", str(workers)], timeout=timeout)
    import datasets
    kept = set(int(i) for i in datasets.load_from_disk(str(out))["id"])
    return seconds, peak, set(range(documents)) - kept


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=1000)
    parser.add_argument("--datatrove-mb", type=float, default=100,
                        help="corpus size for the datatrove comparison (0: skip)")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--other-timeout", type=float, default=1800,
                        help="seconds each other tool may take before it is reported unfinished")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        sizes = [(args.mb, True)]
        if args.datatrove_mb > 0:
            sizes.append((args.datatrove_mb, False)) if args.datatrove_mb != args.mb else None
        for mb, big in sizes:
            corpus = pathlib.Path(tmp, f"corpus-{mb:g}.jsonl")
            t0 = time.perf_counter()
            documents, planted = make_corpus(corpus, mb)
            similar = jaccards(corpus, planted)
            print(f"corpus {corpus.stat().st_size / 1e6:.0f} MB: {documents} documents, "
                  f"{sum(1 for p in planted if p[2] == 'near')} near and "
                  f"{sum(1 for p in planted if p[2] == 'exact')} exact planted copies "
                  f"(made in {time.perf_counter() - t0:.0f} s)", flush=True)
            seconds, peak, stdout, dropped = run_ours(corpus, tmp, args.workers)
            high, recall, precision = score(documents, planted, similar, dropped)
            megabytes = corpus.stat().st_size / 1e6
            print(f"  preprocess: {seconds:.1f} s, {megabytes / seconds:.1f} MB/s "
                  f"({megabytes / seconds / args.workers:.1f} MB/s a core, tokenizing with GPT-2 "
                  f"BPE too), peak RSS {peak:.0f} MiB; recall {recall:.4f} of {high} planted "
                  f"pairs at J >= 0.8, precision {precision:.4f}")
            print("   ", stdout.strip().replace("\n", "\n    "))
            if args.datatrove_mb > 0 and (not big or args.datatrove_mb == args.mb):
                for name, module, run in (("datatrove", "datatrove", run_datatrove),
                                          ("text-dedup", "text_dedup", run_text_dedup)):
                    try:
                        __import__(module)
                    except ImportError:
                        print(f"  {name}: not installed (pip install {name})")
                        continue
                    try:
                        seconds, peak, dropped = run(corpus, tmp, args.workers, documents,
                                                     args.other_timeout)
                    except subprocess.TimeoutExpired:
                        print(f"  {name}: did not finish in {args.other_timeout:.0f} s")
                        continue
                    high, recall, precision = score(documents, planted, similar, dropped)
                    print(f"  {name} MinHash (14 x 9, 5-grams): {seconds:.1f} s, "
                          f"{megabytes / seconds:.1f} MB/s, peak RSS {peak:.0f} MiB (largest "
                          f"process); recall {recall:.4f}, precision {precision:.4f}")


if __name__ == "__main__":
    main()
