"""Legacy-encoding detection of zip member names: datakit against charset-normalizer, same corpus, same run.

    python tools/bench_encoding.py [--trials 40] [--json]

For every encoding that still appears in zip archives (Western CP437/CP850/CP1252, Cyrillic
CP866/KOI8-R/CP1251, CP932, GBK, Big5, CP949, and UTF-8 without its flag), archives of 1, 3 and
10 names are drawn from ``datakit.testing.NAME_CORPUS`` (realistic file names per language) and
from ``HELD_OUT_CORPUS`` (everyday names written apart from datakit's character lists), encoded,
and decoded by each detector. A trial counts as right when every name comes back exactly (CP437
and CP850 give the same names for most Western text: either is right then). datakit's verdicts
are split into right, "ambiguous" (it said so and named the candidates) and wrong while claiming
certainty. charset-normalizer is given the same candidate list (``cp_isolation``) and the names
joined by newlines. The host byte is the one that encoding's writers put in "version made by".
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

try:
    from charset_normalizer import from_bytes
except ImportError:  # the peer is not a dependency of datakit: the `bench` extra installs it
    sys.exit(
        "bench_encoding.py compares against charset-normalizer, which is not installed: "
        'pip install -c constraints.txt -e ".[bench]" (or pip install charset-normalizer)'
    )

from datakit.filenames import CANDIDATES, guess_encoding
from datakit.testing import CLASS_FOLDER_CORPUS, CORPUS_ENCODINGS, HELD_OUT_CORPUS, NAME_CORPUS, TYPICAL_HOST

ROWS = [(lang, enc) for lang, encs in CORPUS_ENCODINGS.items() for enc in encs] + [("all", "utf-8")]
SIZES = (1, 3, 10)
CLASS_SIZES = (1, 2)  # class folders in an archive


def names_for(corpus: dict[str, list[str]], lang: str, enc: str) -> list[str]:
    pool = [n for names in corpus.values() for n in names] if lang == "all" else corpus[lang]
    out = []
    for n in pool:
        try:
            n.encode(enc)
            out.append(n)
        except UnicodeEncodeError:
            pass
    return out


def charset_normalizer_guess(raws: list[bytes]) -> str | None:
    best = from_bytes(b"\n".join(raws), cp_isolation=[e for e, _ in CANDIDATES]).best()
    return None if best is None else best.encoding


def decodes_to(raws: list[bytes], enc: str | None, names: list[str]) -> bool:
    if enc is None:
        return False
    try:
        return [r.decode(enc) for r in raws] == names
    except (UnicodeDecodeError, LookupError):
        return False


def run(trials: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    folders = {lang: words.split() for lang, words in CLASS_FOLDER_CORPUS.items()}
    for corpus_name, corpus in (("file-name vocabulary", NAME_CORPUS), ("held out", HELD_OUT_CORPUS),
                                ("class folders", folders)):  # fmt: skip
        classes = corpus is folders  # a draw of k class folders, three images in each: 蝗虫/IMG_0001.jpg
        for lang, enc in ROWS:
            if lang not in corpus and lang != "all":
                continue
            pool = names_for(corpus, lang, enc)
            host = TYPICAL_HOST.get(enc, 0)
            for k in CLASS_SIZES if classes else SIZES:
                if k > len(pool):
                    continue
                draws = [[n] for n in pool] if k == 1 else [rng.sample(pool, k) for _ in range(trials)]
                if classes:
                    draws = [[f"{c}/IMG_{i:04d}.jpg" for c in d for i in range(1, 4)] for d in draws]
                right = ambiguous = wrong = cn_right = 0
                t_dk = t_cn = 0.0
                for names in draws:
                    raws = [n.encode(enc) for n in names]
                    t0 = time.perf_counter()
                    guess = guess_encoding(raws, [host] * len(raws))
                    t1 = time.perf_counter()
                    cn = charset_normalizer_guess(raws)
                    t2 = time.perf_counter()
                    t_dk += t1 - t0
                    t_cn += t2 - t1
                    if decodes_to(raws, guess.encoding, names):
                        right += 1
                    elif guess.ambiguous:
                        ambiguous += 1
                    else:
                        wrong += 1
                    cn_right += decodes_to(raws, cn, names)
                n = len(draws)
                rows.append({
                    "corpus": corpus_name, "encoding": enc, "names": k, "trials": n,
                    "datakit_right": right / n, "datakit_ambiguous": ambiguous / n, "datakit_wrong": wrong / n,
                    "charset_normalizer_right": cn_right / n,
                    "datakit_ms": 1000 * t_dk / n, "charset_normalizer_ms": 1000 * t_cn / n,
                })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40, help="archives per row for 3 and 10 names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = run(args.trials, args.seed)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        "| corpus | encoding | names | archives | datakit right | datakit ambiguous | datakit wrong | "
        "charset-normalizer right | ms per archive (datakit / c-n) |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['corpus']} | {r['encoding']} | {r['names']} | {r['trials']} | {r['datakit_right']:.0%} | "
            f"{r['datakit_ambiguous']:.0%} | {r['datakit_wrong']:.0%} | {r['charset_normalizer_right']:.0%} | "
            f"{r['datakit_ms']:.2f} / {r['charset_normalizer_ms']:.2f} |"
        )
    for corpus in ("file-name vocabulary", "held out", "class folders"):
        sel = [r for r in rows if r["corpus"] == corpus]
        total = sum(r["trials"] for r in sel)

        def mean(key: str, sel=sel, total=total) -> float:
            return sum(r[key] * r["trials"] for r in sel) / total

        print(
            f"{corpus}: datakit right {mean('datakit_right'):.1%}, ambiguous {mean('datakit_ambiguous'):.1%}, "
            f"wrong {mean('datakit_wrong'):.1%}; charset-normalizer right {mean('charset_normalizer_right'):.1%} "
            f"({total} archives)"
        )


if __name__ == "__main__":
    main()
