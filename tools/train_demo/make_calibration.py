#!/usr/bin/env python3
"""Writes data/calibration/kjv_calibration.jsonl: every 25th training chapter of the corpus.

Usage: tools/train_demo/make_calibration.py [--verses tools/train_demo/data/verses.jsonl]
"""
import argparse
import collections
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verses", default=os.path.join(ROOT, "tools/train_demo/data/verses.jsonl"))
    parser.add_argument("--out", default=os.path.join(ROOT, "data/calibration/kjv_calibration.jsonl"))
    args = parser.parse_args()
    chapters = collections.OrderedDict()
    with open(args.verses) as f:
        for line in f:
            r = json.loads(line)
            if r["split"] == "train":
                chapters.setdefault((r["book"], r["chapter"]), []).append(r["text"])
    with open(args.out, "w") as f:
        for book, chapter in list(chapters)[::25]:
            f.write(json.dumps({"book": book, "chapter": chapter, "text": " ".join(chapters[(book, chapter)])}) + "\n")


if __name__ == "__main__":
    main()
