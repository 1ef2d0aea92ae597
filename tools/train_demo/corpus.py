#!/usr/bin/env python3
"""Builds the demo models' corpus from Debian's King James Bible (package bible-kjv).

Runs `bible Gen1:1-Rev22:21`, parses its pretty-printed output into verse records,
splits chapters into train and held-out, writes the JSONL files that train.py and
ferry's evaluation read, and trains the decoder's SentencePiece BPE vocabulary with
Debian's `spm_train`. Standard library only; the output is deterministic.

Held out (never trained on): every chapter whose number is a multiple of 10, and the
last chapter of each book with fewer than 10 chapters. That is 124 of 1189 chapters.

Proper-name tags (the tagger's labels) come from the text itself by a rule, see
name_spans: title-case words that do not begin a sentence, are not on a short stop list,
and never occur in lower case anywhere in the Bible.

Usage: tools/train_demo/corpus.py [--out tools/train_demo/data] [--skip-spm]
"""

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys

# The 66 books in canonical order, spelt as `bible` prints them, with their group.
GROUPS = [
    ("Law", ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy"]),
    ("History", ["Joshua", "Judges", "Ruth", "1 Samuel", "2 Samuel", "1 Kings", "2 Kings",
                 "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther"]),
    ("Wisdom", ["Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon"]),
    ("Major Prophets", ["Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel"]),
    ("Minor Prophets", ["Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk",
                        "Zephaniah", "Haggai", "Zechariah", "Malachi"]),
    ("Gospels and Acts", ["Matthew", "Mark", "Luke", "John", "Acts"]),
    ("Epistles", ["Romans", "1 Corinthians", "2 Corinthians", "Galatians", "Ephesians",
                  "Philippians", "Colossians", "1 Thessalonians", "2 Thessalonians", "1 Timothy",
                  "2 Timothy", "Titus", "Philemon", "Hebrews", "James", "1 Peter", "2 Peter",
                  "1 John", "2 John", "3 John", "Jude"]),
    ("Revelation", ["Revelation"]),
]
GROUP_NAMES = [name for name, _ in GROUPS]
BOOKS = [book for _, books in GROUPS for book in books]
BOOK_LABEL = {book: label for label, (_, books) in enumerate(GROUPS) for book in books}

EXPECTED_BOOKS = 66
EXPECTED_CHAPTERS = 1189
EXPECTED_VERSES = 31102
EXPECTED_HELDOUT_CHAPTERS = 124

# Classifier passages: 1 to 6 consecutive verses of one chapter, at most this many
# whitespace-separated words unless a single verse is longer. 80 words stay under the
# classifier's 128 tokens (with [CLS] and [SEP]) for all but a handful of verses;
# train.py truncates those.
MAX_PASSAGE_VERSES = 6
MAX_PASSAGE_WORDS = 80
HELDOUT_PASSAGE_SEED = 1611

# SentencePiece options for the decoder's vocabulary. Fixed, so the model file depends
# only on the training text: one thread, every sentence used, no shuffling.
SPM_OPTIONS = [
    "--model_type=bpe",
    "--vocab_size=4096",
    "--character_coverage=1.0",
    "--byte_fallback=true",
    "--unk_id=0",
    "--bos_id=1",
    "--eos_id=2",
    "--pad_id=-1",
    "--add_dummy_prefix=true",
    "--normalization_rule_name=identity",
    "--remove_extra_whitespaces=false",
    "--split_digits=true",
    "--input_sentence_size=0",
    "--shuffle_input_sentence=false",
    "--max_sentence_length=4096",
    "--num_threads=1",
    "--minloglevel=1",
]

# The tagger's labelling rule (name_spans).
NAME_LABEL = "NAME"
NAME_STOP_WORDS = frozenset({"I", "O", "LORD", "GOD", "God", "Lord", "Amen", "Selah", "JEHOVAH"})
_NAME_WORD = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")

_HEADING = re.compile(r"^(.+) (\d+)$")
_VERSE = re.compile(r"^  (\d+) (.*)$")


def is_heldout(chapter, num_chapters):
    """True for chapters never trained on (see the module docstring)."""
    if num_chapters < 10:
        return chapter == num_chapters
    return chapter % 10 == 0


def read_bible():
    """Returns `bible`'s pretty-printed text of the whole Bible."""
    env = dict(os.environ, COLUMNS="80")
    result = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                            text=True, encoding="ascii", env=env)
    return result.stdout


def parse_bible(text):
    """Parses `bible` output into [(book, chapter, verse, text)] in canonical order.

    A heading ("1 Samuel 3") is a line right after a blank line; a verse starts with two
    spaces and its number; any other line continues the verse before it. Verse text is
    whitespace-normalised (runs of spaces become one), since line wrapping already loses
    the two spaces that a few verses have after a full stop.
    """
    verses = []
    book = None
    chapter = 0
    previous_blank = True
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            previous_blank = True
            continue
        verse_match = _VERSE.match(line)
        if previous_blank and not line.startswith(" "):
            heading = _HEADING.match(line)
            if heading is None:
                raise ValueError(f"line {number}: expected a chapter heading, got {line!r}")
            book, chapter = heading.group(1), int(heading.group(2))
            if book not in BOOK_LABEL:
                raise ValueError(f"line {number}: unknown book {book!r}")
        elif verse_match:
            if book is None:
                raise ValueError(f"line {number}: verse before any heading")
            verses.append([book, chapter, int(verse_match.group(1)), verse_match.group(2)])
        else:
            if not verses:
                raise ValueError(f"line {number}: continuation before any verse")
            verses[-1][3] += " " + line
        previous_blank = False
    return [(b, c, v, " ".join(t.split())) for b, c, v, t in verses]


def group_chapters(verses):
    """Groups verse tuples into chapter dicts, checking the order and the counts."""
    chapters = []
    for book, chapter, verse, text in verses:
        if not chapters or chapters[-1]["book"] != book or chapters[-1]["chapter"] != chapter:
            chapters.append({"book": book, "chapter": chapter, "verses": []})
        current = chapters[-1]
        if verse != len(current["verses"]) + 1:
            raise ValueError(f"{book} {chapter}: verse {verse} out of order")
        current["verses"].append(text)

    books_seen = []
    for c in chapters:
        if not books_seen or books_seen[-1] != c["book"]:
            books_seen.append(c["book"])
    if books_seen != BOOKS:
        raise ValueError("books are not the 66 of the canon in order")
    num_chapters = {}
    for c in chapters:
        num_chapters[c["book"]] = c["chapter"]
    for c in chapters:
        c["book_index"] = BOOKS.index(c["book"])
        c["label"] = BOOK_LABEL[c["book"]]
        c["group"] = GROUP_NAMES[c["label"]]
        c["heldout"] = is_heldout(c["chapter"], num_chapters[c["book"]])

    num_verses = sum(len(c["verses"]) for c in chapters)
    num_heldout = sum(c["heldout"] for c in chapters)
    counts = (len(books_seen), len(chapters), num_verses, num_heldout)
    expected = (EXPECTED_BOOKS, EXPECTED_CHAPTERS, EXPECTED_VERSES, EXPECTED_HELDOUT_CHAPTERS)
    if counts != expected:
        raise ValueError(f"books/chapters/verses/held-out chapters {counts}, expected {expected}")
    return chapters


def chapter_text(chapter):
    """The decoder's document for one chapter: its verses joined by single spaces."""
    return " ".join(chapter["verses"])


def make_passages(chapter, rng):
    """Cuts one chapter into consecutive passages of 1 to 6 verses.

    Every verse lands in exactly one passage. A passage's length is drawn from rng, then
    shortened (never below one verse) until it has at most MAX_PASSAGE_WORDS words.
    Returns [(first_verse, last_verse, text)] with 1-based inclusive verse numbers.
    """
    verses = chapter["verses"]
    passages = []
    start = 0
    while start < len(verses):
        count = min(rng.randint(1, MAX_PASSAGE_VERSES), len(verses) - start)
        while count > 1 and sum(len(v.split()) for v in verses[start:start + count]) > MAX_PASSAGE_WORDS:
            count -= 1
        passages.append((start + 1, start + count, " ".join(verses[start:start + count])))
        start += count
    return passages


def lowercase_words(chapters):
    """Every word (letters, hyphen-joined) that starts with a lower-case letter somewhere."""
    words = set()
    for c in chapters:
        for verse in c["verses"]:
            for m in _NAME_WORD.finditer(verse):
                if m.group()[0].islower():
                    words.add(m.group())
    return words


def name_spans(text, lowercase):
    """The proper names of a text as [(start, end)] character spans, by this rule:

    A word is a run of ASCII letters, hyphens joining runs ("Beth-lehem"). It is part of a
    name when it is title case (an upper-case first letter and at least one lower-case
    letter, so "LORD" and "I" are not), is not on NAME_STOP_WORDS, has no lower-case
    spelling anywhere in the Bible (`lowercase`, from lowercase_words: this drops "Father",
    "Let", "Behold", "Sabbath"), and does not begin a sentence: the first word of the text
    and any word whose previous non-space character is ".", "?" or "!" begin sentences.
    Name words separated by a single space form one name ("Simon Peter"); a name never
    includes "'s".
    """
    spans = []
    for m in _NAME_WORD.finditer(text):
        word = m.group()
        before = text[:m.start()].rstrip()
        sentence_start = not before or before[-1] in ".?!"
        title = word[0].isupper() and any(ch.islower() for ch in word)
        if not title or sentence_start or word in NAME_STOP_WORDS or word.lower() in lowercase:
            continue
        if spans and spans[-1][1] + 1 == m.start() and text[spans[-1][1]] == " ":
            spans[-1] = (spans[-1][0], m.end())
        else:
            spans.append((m.start(), m.end()))
    return spans


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=True) + "\n")


def read_chapters(data_dir):
    """Reads verses.jsonl back into the chapter dicts that group_chapters returns."""
    verses = []
    with open(os.path.join(data_dir, "verses.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            verses.append((r["book"], r["chapter"], r["verse"], r["text"]))
    return group_chapters(verses)


def write_corpus(chapters, out_dir):
    """Writes verses, held-out chapters and passages, and the SentencePiece input."""
    verse_rows = []
    for c in chapters:
        for number, text in enumerate(c["verses"], start=1):
            verse_rows.append({"book": c["book"], "book_index": c["book_index"], "chapter": c["chapter"],
                               "verse": number, "group": c["group"], "label": c["label"],
                               "split": "heldout" if c["heldout"] else "train", "text": text})
    write_jsonl(os.path.join(out_dir, "verses.jsonl"), verse_rows)

    heldout = [c for c in chapters if c["heldout"]]
    write_jsonl(os.path.join(out_dir, "heldout_chapters.jsonl"), [
        {"book": c["book"], "chapter": c["chapter"], "group": c["group"], "label": c["label"],
         "num_verses": len(c["verses"]), "text": chapter_text(c)} for c in heldout])

    rng = random.Random(HELDOUT_PASSAGE_SEED)
    passage_rows = []
    for c in heldout:
        for first, last, text in make_passages(c, rng):
            passage_rows.append({"book": c["book"], "chapter": c["chapter"], "first_verse": first,
                                 "last_verse": last, "group": c["group"], "label": c["label"], "text": text})
    write_jsonl(os.path.join(out_dir, "heldout_passages.jsonl"), passage_rows)

    # The tagger's held-out data: whole chapters with their names (character offsets).
    lowercase = lowercase_words(chapters)
    tagged_rows = []
    for c in heldout:
        text = chapter_text(c)
        tagged_rows.append({"book": c["book"], "chapter": c["chapter"], "text": text,
                            "entities": [{"start": a, "end": b, "label": NAME_LABEL}
                                         for a, b in name_spans(text, lowercase)]})
    write_jsonl(os.path.join(out_dir, "heldout_tagged_chapters.jsonl"), tagged_rows)

    # One training verse per line: SentencePiece never merges across spaces, so a
    # chapter's ids are its verses' ids concatenated.
    with open(os.path.join(out_dir, "spm_train.txt"), "w", encoding="utf-8", newline="\n") as f:
        for c in chapters:
            if not c["heldout"]:
                for text in c["verses"]:
                    f.write(text + "\n")
    return len(verse_rows), len(heldout), len(passage_rows)


def train_sentencepiece(out_dir):
    spm_train = shutil.which("spm_train")
    if spm_train is None:
        raise RuntimeError("spm_train not found (Debian package 'sentencepiece')")
    # Relative paths: the model file records its trainer's options, paths included.
    subprocess.run([spm_train, "--input=spm_train.txt", "--model_prefix=kjv_bpe"] + SPM_OPTIONS,
                   check=True, cwd=out_dir)
    return os.path.join(out_dir, "kjv_bpe.model")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    parser.add_argument("--skip-spm", action="store_true", help="do not train the SentencePiece vocabulary")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    chapters = group_chapters(parse_bible(read_bible()))
    num_verses, num_heldout, num_passages = write_corpus(chapters, args.out)
    heldout_verses = sum(len(c["verses"]) for c in chapters if c["heldout"])
    print(f"{EXPECTED_BOOKS} books, {len(chapters)} chapters, {num_verses} verses; held out "
          f"{num_heldout} chapters ({heldout_verses} verses, {num_passages} passages)")
    for name in ("verses.jsonl", "heldout_chapters.jsonl", "heldout_passages.jsonl", "heldout_tagged_chapters.jsonl",
                 "spm_train.txt"):
        print(f"  {name}  sha256 {sha256(os.path.join(args.out, name))}")
    if not args.skip_spm:
        model = train_sentencepiece(args.out)
        print(f"  {os.path.basename(model)}  sha256 {sha256(model)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
