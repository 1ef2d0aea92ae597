#!/usr/bin/env python3
"""Trains ferry's three demo models on the King James Bible corpus that corpus.py builds.

  kjv-decoder     LlamaForCausalLM, next-token LM over chapters of verse text (bf16 export)
  kjv-classifier  BertForSequenceClassification, passage -> one of 8 book groups (fp16 export)
  kjv-tagger      BertForTokenClassification, proper names as BIO tags (corpus.name_spans; fp16 export)

Needs PyTorch, transformers (5.x), tokenizers, sentencepiece and a CUDA GPU. Reads
verses.jsonl, heldout_chapters.jsonl, heldout_passages.jsonl and kjv_bpe.model from
--data; writes the two model folders, reference.safetensors/.json for ferry's tests and
metrics.json under --out. Evaluation numbers are computed in float32 from the exported
(bf16 / fp16) weights, which is what ferry loads.

Held-out perplexity: each held-out chapter is tokenized as [BOS] + ids(chapter text),
where the chapter text is its verses joined by single spaces. The ids are cut into
non-overlapping windows: window k feeds positions [512k, 512k + 512) and predicts
positions [512k + 1, 512k + 513), so every token after BOS is predicted exactly once and
the context restarts at each window. Perplexity = exp(total NLL / predicted tokens) over
all 124 chapters together.
"""

import argparse
import json
import math
import os
import random
import shutil
import struct
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

SEED = 1611
SEQ_LEN = 512
CLASSIFIER_MAX_TOKENS = 128

DECODER_CONFIG = dict(
    vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=8,
    num_attention_heads=8, num_key_value_heads=2, head_dim=32, max_position_embeddings=SEQ_LEN,
    rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, hidden_act="silu",
    attention_bias=False, mlp_bias=False, attention_dropout=0.0, initializer_range=0.02,
    bos_token_id=1, eos_token_id=2, pad_token_id=None,
)
CLASSIFIER_CONFIG = dict(
    hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=768,
    hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    max_position_embeddings=CLASSIFIER_MAX_TOKENS, type_vocab_size=2, layer_norm_eps=1e-12,
    initializer_range=0.02, pad_token_id=0,
)
CLASSIFIER_VOCAB_SIZE = 4096
BERT_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# The tagger: the classifier's shape without the pooler, on a cased vocabulary (names are
# told apart by their capitals), 128-token windows.
TAGGER_MAX_TOKENS = 128
TAGGER_CONFIG = dict(CLASSIFIER_CONFIG, max_position_embeddings=TAGGER_MAX_TOKENS)
TAGGER_LABELS = ["O", "B-" + corpus.NAME_LABEL, "I-" + corpus.NAME_LABEL]
TAGGER_INPUTS = [
    "And Moses and Aaron went in unto Pharaoh, and said unto him, Thus saith the LORD God of the Hebrews.",
    "Then Simon Peter having a sword drew it, and smote the high priest's servant.",
    "And David dwelt in the castle; therefore they called it the city of David.",
]
TAGGER_OVERLAPS = [0, 16, 32, 64]

DECODER_PROMPTS = ["And the LORD said unto", "In the beginning", "Blessed are the"]
CLASSIFIER_INPUTS = [
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel.",
    "The LORD is my shepherd; I shall not want.",
    "Grace be unto you, and peace, from God our Father, and from the Lord Jesus Christ.",
]
REFERENCE_GREEDY_STEPS = 24


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def count_parameters(model):
    """Unique parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def cosine_lr(step, total_steps, warmup_steps, peak, floor_ratio):
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return peak * (floor_ratio + (1 - floor_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model, lr, weight_decay):
    decay, no_decay = [], []
    for p in {id(p): p for p in model.parameters() if p.requires_grad}.values():
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def file_size(path):
    return os.path.getsize(path) if os.path.exists(path) else None


class Budget:
    """Wall-clock since the start of the run; training loops stop early (and say so) past
    their --*-time-s deadlines."""

    def __init__(self):
        self.start = time.time()

    def elapsed(self):
        return time.time() - self.start


# ---------------------------------------------------------------------------------------
# Decoder


def build_llama_tokenizer_json(spm_model, path):
    """Fallback conversion with the tokenizers library alone: the LLaMA-2 pipeline (BPE with
    byte fallback, Metaspace) with merges read off the SentencePiece vocabulary."""
    import sentencepiece
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    sp = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for piece, piece_id in vocab.items():
        if sp.is_control(piece_id) or sp.is_byte(piece_id) or sp.is_unknown(piece_id):
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                merges.append((piece_id, vocab[left], vocab[right], left, right))
    merges.sort()
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges], unk_token="<unk>",
                                     fuse_unk=True, byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                           decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", sp.bos_id())])
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
    tokenizer.save(path)


def write_decoder_tokenizer(out_dir, spm_model, fallback=False):
    """tokenizer.model, tokenizer.json (converted by transformers), tokenizer_config.json."""
    from transformers import AutoTokenizer

    os.makedirs(out_dir, exist_ok=True)
    shutil.copyfile(spm_model, os.path.join(out_dir, "tokenizer.model"))
    config = {
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
        "legacy": False, "add_prefix_space": True, "clean_up_tokenization_spaces": False,
        "model_max_length": SEQ_LEN,
    }
    config_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    if fallback:
        build_llama_tokenizer_json(spm_model, os.path.join(out_dir, "tokenizer.json"))
        return
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    log(f"decoder tokenizer converted: {type(tokenizer).__name__}")
    tokenizer.save_pretrained(out_dir)
    # save_pretrained rewrites the config in its own form; keep the fields ferry reads.
    with open(config_path) as f:
        saved = json.load(f)
    saved.update({k: config[k] for k in ("add_bos_token", "add_eos_token", "bos_token", "eos_token",
                                          "unk_token", "model_max_length", "legacy")})
    for key in ("is_local", "local_files_only"):  # where it was loaded from, not a setting
        saved.pop(key, None)
    with open(config_path, "w") as f:
        json.dump(saved, f, indent=2)
    shutil.copyfile(spm_model, os.path.join(out_dir, "tokenizer.model"))


def check_decoder_tokenizer(out_dir, sp, texts):
    """Compares transformers' and raw tokenizer.json ids against sentencepiece's."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(out_dir)
    raw = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    result = {"texts": len(texts), "class": type(hf).__name__, "hf_mismatches": 0,
              "tokenizer_json_mismatches": 0, "hf_adds_bos": 0, "tokenizer_json_adds_bos": 0, "examples": []}
    for text in texts:
        want = sp.encode(text)
        got_hf = hf(text, add_special_tokens=False).input_ids
        got_raw = raw.encode(text, add_special_tokens=False).ids
        result["hf_mismatches"] += got_hf != want
        result["tokenizer_json_mismatches"] += got_raw != want
        result["hf_adds_bos"] += hf(text).input_ids == [sp.bos_id()] + want
        result["tokenizer_json_adds_bos"] += raw.encode(text).ids == [sp.bos_id()] + want
        if (got_hf != want or got_raw != want) and len(result["examples"]) < 5:
            result["examples"].append({"text": text, "sentencepiece": want, "hf": got_hf, "tokenizer_json": got_raw})
    decoded = hf.decode(hf(texts[0]).input_ids, skip_special_tokens=True)
    result["decode_round_trip"] = decoded == texts[0]
    return result


def decoder_windows(docs):
    """Non-overlapping windows (see the module docstring): [(inputs, targets)]."""
    windows = []
    for ids in docs:
        for start in range(0, len(ids) - 1, SEQ_LEN):
            targets = ids[start + 1:start + SEQ_LEN + 1]
            windows.append((ids[start:start + len(targets)], targets))
    return windows


@torch.no_grad()
def decoder_perplexity(model, windows, device, autocast, batch_size=64):
    was_training = model.training
    model.eval()
    total_nll, total_tokens = 0.0, 0
    for i in range(0, len(windows), batch_size):
        chunk = windows[i:i + batch_size]
        width = max(len(x) for x, _ in chunk)
        inputs = torch.zeros(len(chunk), width, dtype=torch.long)
        targets = torch.full((len(chunk), width), -100, dtype=torch.long)
        for row, (x, y) in enumerate(chunk):
            inputs[row, :len(x)] = torch.tensor(x)
            targets[row, :len(y)] = torch.tensor(y)
        inputs, targets = inputs.to(device), targets.to(device)
        # Right padding is safe without a mask: causal attention never looks ahead.
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=inputs).logits
        nll = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1),
                              ignore_index=-100, reduction="sum")
        total_nll += nll.item()
        total_tokens += int((targets != -100).sum())
    model.train(was_training)
    return math.exp(total_nll / total_tokens), total_tokens


def decoder_batches(docs, batch_size, seed):
    """Endless (inputs, targets) batches: each epoch shuffles chapter order, concatenates
    the chapters ([BOS] ids [EOS] each), starts at a random offset and cuts 512-token rows."""
    docs = [torch.tensor(d, dtype=torch.long) for d in docs]
    epoch = 0
    while True:
        rng = random.Random(seed * 1000 + epoch)
        order = list(range(len(docs)))
        rng.shuffle(order)
        stream = torch.cat([docs[i] for i in order])
        offset = rng.randrange(SEQ_LEN)
        rows = (len(stream) - offset - 1) // SEQ_LEN
        inputs = stream[offset:offset + rows * SEQ_LEN].view(rows, SEQ_LEN)
        targets = stream[offset + 1:offset + rows * SEQ_LEN + 1].view(rows, SEQ_LEN)
        generator = torch.Generator().manual_seed(seed * 1000 + epoch)
        perm = torch.randperm(rows, generator=generator)
        for i in range(0, rows - batch_size + 1, batch_size):
            yield epoch, inputs[perm[i:i + batch_size]], targets[perm[i:i + batch_size]]
        epoch += 1


def add_residual_dropout(model, p):
    """Dropout on the embedding output and on each attention / MLP branch before it joins
    the residual stream (LlamaConfig has no such option). Training only; not exported."""
    def hook(module, inputs, output):
        return F.dropout(output, p, module.training)
    modules = [model.model.embed_tokens]
    for layer in model.model.layers:
        modules += [layer.self_attn.o_proj, layer.mlp.down_proj]
    return [m.register_forward_hook(hook) for m in modules]


def train_decoder(args, sp, report, budget, out_dir):
    from transformers import LlamaConfig, LlamaForCausalLM

    device = torch.device("cuda")
    chapters = corpus.read_chapters(args.data)
    train_docs = [[sp.bos_id()] + sp.encode(corpus.chapter_text(c)) + [sp.eos_id()]
                  for c in chapters if not c["heldout"]]
    heldout_rows = read_jsonl(os.path.join(args.data, "heldout_chapters.jsonl"))
    heldout_docs = [[sp.bos_id()] + sp.encode(r["text"]) for r in heldout_rows]
    windows = decoder_windows(heldout_docs)
    # Every ninth training chapter, measured like the held-out ones, shows the train/held-out gap.
    train_windows = decoder_windows([d[:-1] for d in train_docs[::9]])
    train_tokens = sum(len(d) for d in train_docs)
    log(f"decoder data: {len(train_docs)} train chapters, {train_tokens} tokens; "
        f"{len(heldout_docs)} held-out chapters, {len(windows)} windows")

    torch.manual_seed(SEED)
    config = LlamaConfig(**DECODER_CONFIG)
    model = LlamaForCausalLM(config).to(device)
    model.train()
    params = count_parameters(model)
    log(f"decoder parameters: {params}")
    if params > 8_000_000:
        raise ValueError("decoder over 8M parameters")
    hooks = add_residual_dropout(model, args.decoder_dropout)
    optimizer = make_optimizer(model, args.decoder_lr, 0.1)

    steps = args.decoder_steps
    warmup = min(200, steps // 10)
    batches = decoder_batches(train_docs, args.decoder_batch, SEED)
    history = []
    start = time.time()
    deadline = budget.elapsed() + args.decoder_time_s
    loss_sum, loss_count, done = 0.0, 0, 0
    for step in range(steps):
        if budget.elapsed() > deadline:
            log(f"decoder: time limit reached at step {step} of {steps}")
            break
        done = step + 1
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, steps, warmup, args.decoder_lr, 0.1)
        epoch, inputs, targets = next(batches)
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=inputs).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_sum += loss.item() if (step + 1) % 25 == 0 else 0.0
        loss_count += 1 if (step + 1) % 25 == 0 else 0
        if (step + 1) % args.eval_every == 0 or step + 1 == steps:
            ppl, _ = decoder_perplexity(model, windows, device, autocast=True)
            train_ppl, _ = decoder_perplexity(model, train_windows, device, autocast=True)
            train_loss = loss_sum / max(1, loss_count)
            history.append({"step": step + 1, "epoch": epoch, "train_loss": round(train_loss, 4),
                            "train_sample_ppl_bf16": round(train_ppl, 3), "heldout_ppl_bf16": round(ppl, 3),
                            "seconds": round(time.time() - start, 1)})
            log(f"decoder step {step + 1}/{steps} epoch {epoch} loss {train_loss:.4f} "
                f"train-sample ppl {train_ppl:.3f} held-out ppl {ppl:.3f} ({time.time() - start:.0f}s)")
            loss_sum, loss_count = 0.0, 0
    torch.cuda.synchronize()
    seconds = time.time() - start
    for h in hooks:
        h.remove()
    report["decoder"].update({
        "parameters": params, "train_chapters": len(train_docs), "train_tokens": train_tokens,
        "heldout_chapters": len(heldout_docs), "heldout_windows": len(windows),
        "steps_planned": steps, "steps_done": done, "batch_size": args.decoder_batch,
        "tokens_per_step": args.decoder_batch * SEQ_LEN, "epochs": history[-1]["epoch"] + 1 if history else 0,
        "peak_lr": args.decoder_lr, "dropout": args.decoder_dropout, "train_seconds": round(seconds, 1),
        "history": history, "final_train_loss": history[-1]["train_loss"] if history else None,
    })

    model.eval()
    model.to(torch.bfloat16)
    model.generation_config.bos_token_id = sp.bos_id()
    model.generation_config.eos_token_id = sp.eos_id()
    model.generation_config.pad_token_id = None
    model.save_pretrained(out_dir)
    del model, optimizer
    torch.cuda.empty_cache()
    return windows


def evaluate_decoder(out_dir, windows, report):
    """Float32 perplexity and samples from the exported bf16 checkpoint."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.float32).to(device).eval()
    ppl, tokens = decoder_perplexity(model, windows, device, autocast=False)
    log(f"decoder held-out perplexity (float32 from bf16 weights): {ppl:.4f} over {tokens} tokens")
    report["decoder"]["heldout_ppl"] = round(ppl, 4)
    report["decoder"]["heldout_tokens"] = tokens

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    samples = []
    for text in DECODER_PROMPTS:
        ids = tokenizer(text, return_tensors="pt").input_ids.to(device)
        greedy = model.generate(ids, max_new_tokens=48, do_sample=False)
        torch.manual_seed(SEED)
        sampled = model.generate(ids, max_new_tokens=48, do_sample=True, temperature=0.8, top_p=0.95)
        sample = {"prompt": text,
                  "greedy": tokenizer.decode(greedy[0, ids.size(1):], skip_special_tokens=True),
                  "sampled": tokenizer.decode(sampled[0, ids.size(1):], skip_special_tokens=True)}
        samples.append(sample)
        log(f"sample {text!r}\n    greedy : {sample['greedy']}\n    sampled: {sample['sampled']}")
    report["decoder"]["samples"] = samples
    del model
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# Classifier


def train_wordpiece(texts, out_dir, lowercase=True, max_tokens=CLASSIFIER_MAX_TOKENS):
    """BERT WordPiece vocabulary (uncased unless `lowercase` is False): tokenizer.json,
    vocab.txt, tokenizer_config.json."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##",
                                           max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=None if lowercase else False,
                                                      lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=CLASSIFIER_VOCAB_SIZE, min_frequency=2,
                                        special_tokens=BERT_SPECIAL_TOKENS, continuing_subword_prefix="##",
                                        show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tokenizer.decoder = decoders.WordPiece(prefix="##")

    os.makedirs(out_dir, exist_ok=True)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    vocab = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    if [i for _, i in vocab] != list(range(len(vocab))):
        raise ValueError("WordPiece ids are not contiguous")
    with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        for token, _ in vocab:
            f.write(token + "\n")
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase,
              "strip_accents": None if lowercase else False,
              "tokenize_chinese_chars": True, "cls_token": "[CLS]", "sep_token": "[SEP]",
              "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]",
              "model_max_length": max_tokens}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return tokenizer


def check_classifier_tokenizer(out_dir, raw, texts):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(out_dir)
    result = {"texts": len(texts), "hf_mismatches": 0, "examples": [], "class": type(hf).__name__}
    for text in texts:
        want = raw.encode(text).ids
        if len(want) > CLASSIFIER_MAX_TOKENS:
            want = want[:CLASSIFIER_MAX_TOKENS - 1] + [raw.token_to_id("[SEP]")]
        got = hf(text, truncation=True, max_length=CLASSIFIER_MAX_TOKENS).input_ids
        if got != want:
            result["hf_mismatches"] += 1
            if len(result["examples"]) < 5:
                result["examples"].append({"text": text, "tokenizers": want, "hf": got})
    return result


def passage_batches(chapters, verse_ids, batch_size, seed, cls_id, sep_id):
    """Endless (input_ids, attention_mask, labels) batches of training passages. Each epoch
    re-cuts every train chapter with corpus.make_passages and its own seed."""
    epoch = 0
    content = CLASSIFIER_MAX_TOKENS - 2
    while True:
        rng = random.Random(seed * 1000 + epoch)
        samples = []
        for c in chapters:
            ids = verse_ids[(c["book"], c["chapter"])]
            for first, last, _ in corpus.make_passages(c, rng):
                tokens = [t for v in range(first - 1, last) for t in ids[v]]
                samples.append(([cls_id] + tokens[:content] + [sep_id], c["label"]))
        rng.shuffle(samples)
        for i in range(0, len(samples) - batch_size + 1, batch_size):
            chunk = samples[i:i + batch_size]
            width = max(len(x) for x, _ in chunk)
            input_ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for row, (x, _) in enumerate(chunk):
                input_ids[row, :len(x)] = torch.tensor(x)
                mask[row, :len(x)] = 1
            yield epoch, len(samples), input_ids, mask, torch.tensor([y for _, y in chunk])
        epoch += 1


def encode_passages(tokenizer, rows):
    """HF-tokenized held-out passages (truncated to 128 tokens, as ferry would)."""
    enc = tokenizer([r["text"] for r in rows], truncation=True, max_length=CLASSIFIER_MAX_TOKENS)
    full = tokenizer([r["text"] for r in rows], truncation=False)
    truncated = sum(len(x) > CLASSIFIER_MAX_TOKENS for x in full.input_ids)
    return enc.input_ids, [r["label"] for r in rows], truncated


@torch.no_grad()
def classifier_accuracy(model, input_ids, labels, device, autocast, batch_size=256):
    was_training = model.training
    model.eval()
    predictions = []
    for i in range(0, len(input_ids), batch_size):
        chunk = input_ids[i:i + batch_size]
        width = max(len(x) for x in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, x in enumerate(chunk):
            ids[row, :len(x)] = torch.tensor(x)
            mask[row, :len(x)] = 1
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                           token_type_ids=torch.zeros_like(ids).to(device)).logits
        predictions += logits.argmax(-1).tolist()
    model.train(was_training)
    correct = sum(p == y for p, y in zip(predictions, labels))
    per_class = {}
    for label, name in enumerate(corpus.GROUP_NAMES):
        idx = [i for i, y in enumerate(labels) if y == label]
        per_class[name] = {"n": len(idx), "accuracy": round(sum(predictions[i] == label for i in idx) / max(1, len(idx)), 4)}
    confusion = [[0] * len(corpus.GROUP_NAMES) for _ in corpus.GROUP_NAMES]
    for p, y in zip(predictions, labels):
        confusion[y][p] += 1
    return correct / len(labels), per_class, confusion


def train_classifier(args, report, budget, out_dir):
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    device = torch.device("cuda")
    chapters = corpus.read_chapters(args.data)
    train_chapters = [c for c in chapters if not c["heldout"]]
    train_texts = [v for c in train_chapters for v in c["verses"]]
    raw = train_wordpiece(train_texts, out_dir)
    log(f"classifier WordPiece vocabulary: {raw.get_vocab_size()} tokens")
    encoded = raw.encode_batch(train_texts, add_special_tokens=False)
    verse_ids, k = {}, 0
    for c in train_chapters:
        verse_ids[(c["book"], c["chapter"])] = [e.ids for e in encoded[k:k + len(c["verses"])]]
        k += len(c["verses"])

    heldout_rows = read_jsonl(os.path.join(args.data, "heldout_passages.jsonl"))
    try:
        report["classifier"]["tokenizer_check"] = check_classifier_tokenizer(
            out_dir, raw, [r["text"] for r in heldout_rows[:1000]])
        log(f"classifier tokenizer check: {report['classifier']['tokenizer_check']}")
    except Exception:  # a verification, not a product: report it and go on
        traceback.print_exc()
        report["classifier"]["tokenizer_check"] = {"error": traceback.format_exc(limit=2)}
    hf_tokenizer = AutoTokenizer.from_pretrained(out_dir)
    eval_ids, eval_labels, truncated = encode_passages(hf_tokenizer, heldout_rows)
    log(f"held-out passages: {len(eval_ids)} ({truncated} truncated to {CLASSIFIER_MAX_TOKENS} tokens)")

    torch.manual_seed(SEED)
    config = BertConfig(vocab_size=raw.get_vocab_size(), num_labels=len(corpus.GROUP_NAMES),
                        id2label={i: n for i, n in enumerate(corpus.GROUP_NAMES)},
                        label2id={n: i for i, n in enumerate(corpus.GROUP_NAMES)},
                        problem_type="single_label_classification", **CLASSIFIER_CONFIG)
    model = BertForSequenceClassification(config).to(device)
    model.train()
    params = count_parameters(model)
    log(f"classifier parameters: {params}")
    if params > 4_000_000:
        raise ValueError("classifier over 4M parameters")
    optimizer = make_optimizer(model, args.classifier_lr, 0.01)

    steps = args.classifier_steps
    warmup = max(1, steps // 10)
    batches = passage_batches(train_chapters, verse_ids, args.classifier_batch, SEED,
                              raw.token_to_id("[CLS]"), raw.token_to_id("[SEP]"))
    history = []
    start = time.time()
    deadline = budget.elapsed() + args.classifier_time_s
    loss_sum, loss_count, done, per_epoch = 0.0, 0, 0, 0
    for step in range(steps):
        if budget.elapsed() > deadline:
            log(f"classifier: time limit reached at step {step} of {steps}")
            break
        done = step + 1
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, steps, warmup, args.classifier_lr, 0.0)
        epoch, per_epoch, input_ids, mask, labels = next(batches)
        input_ids, mask, labels = input_ids.to(device), mask.to(device), labels.to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=input_ids, attention_mask=mask,
                           token_type_ids=torch.zeros_like(input_ids)).logits
        loss = F.cross_entropy(logits.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % 25 == 0:
            loss_sum += loss.item()
            loss_count += 1
        if (step + 1) % args.eval_every == 0 or step + 1 == steps:
            accuracy, _, _ = classifier_accuracy(model, eval_ids, eval_labels, device, autocast=True)
            train_loss = loss_sum / max(1, loss_count)
            history.append({"step": step + 1, "epoch": epoch, "train_loss": round(train_loss, 4),
                            "heldout_accuracy_bf16": round(accuracy, 4), "seconds": round(time.time() - start, 1)})
            log(f"classifier step {step + 1}/{steps} epoch {epoch} loss {train_loss:.4f} "
                f"held-out accuracy {accuracy:.4f} ({time.time() - start:.0f}s)")
            loss_sum, loss_count = 0.0, 0
    torch.cuda.synchronize()
    report["classifier"].update({
        "parameters": params, "vocab_size": raw.get_vocab_size(), "train_chapters": len(train_chapters),
        "train_passages_per_epoch": per_epoch, "heldout_passages": len(eval_ids),
        "heldout_truncated": truncated, "steps_planned": steps, "steps_done": done,
        "batch_size": args.classifier_batch, "epochs": history[-1]["epoch"] + 1 if history else 0,
        "peak_lr": args.classifier_lr, "train_seconds": round(time.time() - start, 1), "history": history,
        "final_train_loss": history[-1]["train_loss"] if history else None,
    })
    model.eval()
    model.to(torch.float16)
    model.save_pretrained(out_dir)
    del model, optimizer
    torch.cuda.empty_cache()
    return eval_ids, eval_labels


def evaluate_classifier(out_dir, eval_ids, eval_labels, report):
    from transformers import BertForSequenceClassification

    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    model = BertForSequenceClassification.from_pretrained(out_dir, dtype=torch.float32).to(device).eval()
    accuracy, per_class, confusion = classifier_accuracy(model, eval_ids, eval_labels, device, autocast=False)
    log(f"classifier held-out accuracy (float32 from fp16 weights): {accuracy:.4f}")
    for name, v in per_class.items():
        log(f"    {name:18s} n={v['n']:4d} accuracy {v['accuracy']:.4f}")
    report["classifier"].update({"heldout_accuracy": round(accuracy, 4), "per_class": per_class,
                                 "confusion": confusion})


# ---------------------------------------------------------------------------------------
# Tagger


def tagger_chapters(chapters, raw, lowercase):
    """Per chapter: its text, its names (corpus.name_spans over the whole chapter, so a
    passage that starts mid-sentence keeps the names at its start) and, per verse, the
    token ids and BIO labels (B on an entity's first token, I on its other tokens)."""
    out = []
    for c in chapters:
        text = corpus.chapter_text(c)
        spans = corpus.name_spans(text, lowercase)
        starts = {a for a, _ in spans}
        inside = [0] * (len(text) + 1)
        for a, b in spans:
            for k in range(a, b):
                inside[k] = 1
        verses, pos = [], 0
        for verse in c["verses"]:
            enc = raw.encode(verse, add_special_tokens=False)
            labels = []
            for a, b in enc.offsets:
                a, b = a + pos, b + pos
                labels.append(1 if a in starts else (2 if inside[a] else 0))
            verses.append((enc.ids, labels))
            pos += len(verse) + 1  # the space that joins verses
        out.append({"book": c["book"], "chapter": c["chapter"], "text": text, "spans": spans, "verses": verses,
                    "chapter_dict": c})
    return out


def tagger_batches(chapters, batch_size, seed, cls_id, sep_id):
    """Endless (input_ids, attention_mask, labels) batches of training passages (re-cut
    every epoch as the classifier's are), labels -100 on [CLS], [SEP] and padding."""
    epoch = 0
    content = TAGGER_MAX_TOKENS - 2
    while True:
        rng = random.Random(seed * 1000 + 7 + epoch)
        samples = []
        for c in chapters:
            for first, last, _ in corpus.make_passages(c["chapter_dict"], rng):
                ids = [t for v in range(first - 1, last) for t in c["verses"][v][0]][:content]
                labels = [t for v in range(first - 1, last) for t in c["verses"][v][1]][:content]
                if labels and labels[0] == 2:
                    labels[0] = 1  # a name cut at the passage start begins there
                samples.append(([cls_id] + ids + [sep_id], [-100] + labels + [-100]))
        rng.shuffle(samples)
        for i in range(0, len(samples) - batch_size + 1, batch_size):
            chunk = samples[i:i + batch_size]
            width = max(len(x) for x, _ in chunk)
            input_ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            labels = torch.full((len(chunk), width), -100, dtype=torch.long)
            for row, (x, y) in enumerate(chunk):
                input_ids[row, :len(x)] = torch.tensor(x)
                mask[row, :len(x)] = 1
                labels[row, :len(y)] = torch.tensor(y)
            yield epoch, len(samples), input_ids, mask, labels
        epoch += 1


def entity_f1(predicted, gold):
    """Exact-match entity scores over documents: lists of {(start, end, label)} sets."""
    tp = sum(len(p & g) for p, g in zip(predicted, gold))
    n_pred = sum(len(p) for p in predicted)
    n_gold = sum(len(g) for g in gold)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"f1": round(f1, 4), "precision": round(precision, 4), "recall": round(recall, 4), "true_positives": tp,
            "predicted": n_pred, "gold": n_gold}


def heldout_tagged(args):
    rows = read_jsonl(os.path.join(args.data, "heldout_tagged_chapters.jsonl"))
    gold = [{(e["start"], e["end"], e["label"]) for e in r["entities"]} for r in rows]
    return [r["text"] for r in rows], gold


@torch.no_grad()
def tagger_token_accuracy(model, batches, device):
    """Token accuracy and name-token recall on a fixed list of held-out batches."""
    was_training = model.training
    model.eval()
    correct = total = name_hit = name_total = 0
    for input_ids, mask, labels in batches:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                           token_type_ids=torch.zeros_like(input_ids).to(device)).logits
        pred = logits.argmax(-1).cpu()
        keep = labels != -100
        correct += int(((pred == labels) & keep).sum())
        total += int(keep.sum())
        names = keep & (labels > 0)
        name_hit += int(((pred == labels) & names).sum())
        name_total += int(names.sum())
    model.train(was_training)
    return correct / max(1, total), name_hit / max(1, name_total)


def train_tagger(args, report, budget, out_dir):
    from transformers import BertConfig, BertForTokenClassification

    device = torch.device("cuda")
    chapters = corpus.read_chapters(args.data)
    lowercase = corpus.lowercase_words(chapters)
    train_chapters = [c for c in chapters if not c["heldout"]]
    raw = train_wordpiece([v for c in train_chapters for v in c["verses"]], out_dir, lowercase=False,
                          max_tokens=TAGGER_MAX_TOKENS)
    log(f"tagger cased WordPiece vocabulary: {raw.get_vocab_size()} tokens")
    cls_id, sep_id = raw.token_to_id("[CLS]"), raw.token_to_id("[SEP]")
    train = tagger_chapters(train_chapters, raw, lowercase)
    heldout = tagger_chapters([c for c in chapters if c["heldout"]], raw, lowercase)
    eval_batches = []
    for k, (_, _, ids, mask, labels) in enumerate(tagger_batches(heldout, 256, SEED, cls_id, sep_id)):
        eval_batches.append((ids, mask, labels))
        if k == 3:
            break
    names = sum(len(c["spans"]) for c in train)
    log(f"tagger data: {len(train)} train chapters with {names} names; {len(heldout)} held-out chapters with "
        f"{sum(len(c['spans']) for c in heldout)} names")

    torch.manual_seed(SEED)
    config = BertConfig(vocab_size=raw.get_vocab_size(), num_labels=len(TAGGER_LABELS),
                        id2label=dict(enumerate(TAGGER_LABELS)), label2id={n: i for i, n in enumerate(TAGGER_LABELS)},
                        **TAGGER_CONFIG)
    model = BertForTokenClassification(config).to(device)
    model.train()
    params = count_parameters(model)
    log(f"tagger parameters: {params}")
    if params > 4_000_000:
        raise ValueError("tagger over 4M parameters")
    optimizer = make_optimizer(model, args.tagger_lr, 0.01)
    steps = args.tagger_steps
    warmup = max(1, steps // 10)
    batches = tagger_batches(train, args.tagger_batch, SEED, cls_id, sep_id)
    history, start = [], time.time()
    deadline = budget.elapsed() + args.tagger_time_s
    loss_sum, loss_count, done, per_epoch = 0.0, 0, 0, 0
    for step in range(steps):
        if budget.elapsed() > deadline:
            log(f"tagger: time limit reached at step {step} of {steps}")
            break
        done = step + 1
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, steps, warmup, args.tagger_lr, 0.0)
        epoch, per_epoch, input_ids, mask, labels = next(batches)
        input_ids, mask, labels = input_ids.to(device), mask.to(device), labels.to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=input_ids, attention_mask=mask, token_type_ids=torch.zeros_like(input_ids)).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % 25 == 0:
            loss_sum += loss.item()
            loss_count += 1
        if (step + 1) % args.eval_every == 0 or step + 1 == steps:
            accuracy, name_recall = tagger_token_accuracy(model, eval_batches, device)
            train_loss = loss_sum / max(1, loss_count)
            history.append({"step": step + 1, "epoch": epoch, "train_loss": round(train_loss, 4),
                            "heldout_token_accuracy_bf16": round(accuracy, 4),
                            "heldout_name_token_recall_bf16": round(name_recall, 4),
                            "seconds": round(time.time() - start, 1)})
            log(f"tagger step {step + 1}/{steps} epoch {epoch} loss {train_loss:.4f} held-out token accuracy "
                f"{accuracy:.4f}, name tokens {name_recall:.4f} ({time.time() - start:.0f}s)")
            loss_sum, loss_count = 0.0, 0
    torch.cuda.synchronize()
    report["tagger"].update({
        "parameters": params, "vocab_size": raw.get_vocab_size(), "train_chapters": len(train),
        "train_names": names, "train_passages_per_epoch": per_epoch, "steps_planned": steps, "steps_done": done,
        "batch_size": args.tagger_batch, "epochs": history[-1]["epoch"] + 1 if history else 0,
        "peak_lr": args.tagger_lr, "train_seconds": round(time.time() - start, 1), "history": history,
        "final_train_loss": history[-1]["train_loss"] if history else None,
    })
    model.eval()
    model.to(torch.float16)
    model.save_pretrained(out_dir)
    del model, optimizer
    torch.cuda.empty_cache()


def evaluate_tagger(args, out_dir, report):
    """Entity F1 on whole held-out chapters in float32 from the fp16 weights: the first 128
    tokens only (the pipeline truncates), and the whole chapter in 128-token windows at
    each overlap of TAGGER_OVERLAPS (transformers' pipeline with `stride`, whose merge is
    ferry's chunk_merge "hf"). Aggregation "simple"."""
    from transformers import AutoTokenizer, BertForTokenClassification, pipeline

    torch.backends.cuda.matmul.allow_tf32 = False
    model = BertForTokenClassification.from_pretrained(out_dir, dtype=torch.float32).to("cuda").eval()
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    texts, gold = heldout_tagged(args)
    results = {}
    for stride in [None] + TAGGER_OVERLAPS:
        pipe = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple",
                        device=0, **({} if stride is None else {"stride": stride}))
        predicted = []
        for text in texts:
            entities = pipe(text)
            predicted.append({(int(e["start"]), int(e["end"]), e["entity_group"]) for e in entities})
        key = "truncated_128" if stride is None else f"chunked_128_overlap_{stride}"
        results[key] = entity_f1(predicted, gold)
        log(f"tagger held-out chapters, {key}: {results[key]}")
    report["tagger"]["heldout_chapters"] = results
    del model
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# References for ferry's tests


def save_safetensors(path, tensors):
    """Minimal safetensors writer (sorted keys, little-endian, 8-byte aligned header)."""
    header, blobs, offset = {}, [], 0
    names = {torch.float32: "F32", torch.int32: "I32"}
    for name in sorted(tensors):
        t = tensors[name].contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


@torch.no_grad()
def decoder_reference(out_dir, sp, tensors, meta):
    from transformers import AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.float64, attn_implementation="eager").eval()
    prompts = []
    for j, text in enumerate(DECODER_PROMPTS):
        ids = tokenizer(text).input_ids
        if sp is not None and ids != [sp.bos_id()] + sp.encode(text):
            raise ValueError(f"tokenizer ids for {text!r} differ from sentencepiece")
        logits = model(torch.tensor([ids])).logits[0, -1]
        sequence, greedy, margin = list(ids), [], float("inf")
        step_logits = logits
        for _ in range(REFERENCE_GREEDY_STEPS):
            top2 = torch.topk(step_logits, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            token = int(step_logits.argmax())
            greedy.append(token)
            sequence.append(token)
            step_logits = model(torch.tensor([sequence])).logits[0, -1]
        tensors[f"p{j}.input_ids"] = torch.tensor(ids, dtype=torch.int32)
        tensors[f"p{j}.last_logits"] = logits.float()
        tensors[f"p{j}.greedy_ids"] = torch.tensor(greedy, dtype=torch.int32)
        prompts.append({"index": j, "text": text, "n_input": len(ids), "input_ids": ids,
                        "greedy_ids": greedy, "greedy_text": tokenizer.decode(greedy),
                        "min_top2_margin": margin})
    meta["decoder"] = {"model": "models/demo/kjv-decoder", "prompts": prompts}


@torch.no_grad()
def classifier_reference(out_dir, tensors, meta):
    from transformers import AutoTokenizer, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = BertForSequenceClassification.from_pretrained(out_dir, dtype=torch.float64,
                                                          attn_implementation="eager").eval()
    inputs = []
    for j, text in enumerate(CLASSIFIER_INPUTS):
        enc = tokenizer(text)
        ids = torch.tensor([enc.input_ids])
        types = torch.tensor([enc.token_type_ids])
        logits = model(input_ids=ids, token_type_ids=types).logits[0]
        tensors[f"i{j}.input_ids"] = ids[0].to(torch.int32)
        tensors[f"i{j}.token_type_ids"] = types[0].to(torch.int32)
        tensors[f"i{j}.logits"] = logits.float()
        label = int(logits.argmax())
        inputs.append({"index": j, "text": text, "n_tokens": len(enc.input_ids), "input_ids": enc.input_ids,
                       "predicted": model.config.id2label[label]})
    batch = tokenizer(CLASSIFIER_INPUTS, padding=True, return_tensors="pt")
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   token_type_ids=batch.token_type_ids).logits
    tensors["batch.input_ids"] = batch.input_ids.to(torch.int32)
    tensors["batch.attention_mask"] = batch.attention_mask.to(torch.int32)
    tensors["batch.logits"] = logits.float()
    meta["classifier"] = {"model": "models/demo/kjv-classifier", "labels": corpus.GROUP_NAMES, "inputs": inputs}


@torch.no_grad()
def tagger_reference(out_dir, tensors, meta):
    from transformers import AutoTokenizer, BertForTokenClassification, pipeline

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = BertForTokenClassification.from_pretrained(out_dir, dtype=torch.float64,
                                                       attn_implementation="eager").eval()
    # device="cpu": the pipeline would otherwise move the float64 reference model to the GPU.
    pipe = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple",
                    device="cpu")
    inputs = []
    for j, text in enumerate(TAGGER_INPUTS):
        enc = tokenizer(text)
        ids = torch.tensor([enc.input_ids])
        logits = model(input_ids=ids, token_type_ids=torch.tensor([enc.token_type_ids])).logits[0]
        tensors[f"t{j}.input_ids"] = ids[0].to(torch.int32)
        tensors[f"t{j}.logits"] = logits.float()
        entities = [{"label": e["entity_group"], "start": int(e["start"]), "end": int(e["end"]),
                     "score": float(e["score"]), "word": e["word"]} for e in pipe(text)]
        inputs.append({"index": j, "text": text, "input_ids": enc.input_ids, "entities": entities})
    meta["tagger"] = {"model": "models/demo/kjv-tagger", "labels": TAGGER_LABELS, "inputs": inputs}


# ---------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--data", default=os.path.join(here, "data"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--decoder-steps", type=int, default=1000)
    parser.add_argument("--decoder-batch", type=int, default=32)
    parser.add_argument("--decoder-lr", type=float, default=2e-3)
    parser.add_argument("--decoder-dropout", type=float, default=0.15)
    parser.add_argument("--decoder-time-s", type=float, default=240)
    parser.add_argument("--classifier-steps", type=int, default=4000)
    parser.add_argument("--classifier-batch", type=int, default=64)
    parser.add_argument("--classifier-lr", type=float, default=5e-4)
    parser.add_argument("--classifier-time-s", type=float, default=200)
    parser.add_argument("--tagger-steps", type=int, default=3000)
    parser.add_argument("--tagger-batch", type=int, default=64)
    parser.add_argument("--tagger-lr", type=float, default=5e-4)
    parser.add_argument("--tagger-time-s", type=float, default=200)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--keep-going", action="store_true", help="run later stages after a failed one")
    parser.add_argument("--only", choices=["decoder", "classifier", "tagger"],
                        help="train one model; the others' references come from their folders under --out, if there")
    args = parser.parse_args()

    try:
        import sentencepiece
    except ImportError:
        # Training the decoder needs it; the other stages only cross-check the decoder's
        # tokenizer with it, and skip that check without it.
        if args.only in (None, "decoder"):
            raise
        sentencepiece = None
    import transformers

    budget = Budget()
    random.seed(SEED)
    torch.manual_seed(SEED)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"device {torch.cuda.get_device_name(0)}")

    decoder_dir = os.path.join(args.out, "kjv-decoder")
    classifier_dir = os.path.join(args.out, "kjv-classifier")
    tagger_dir = os.path.join(args.out, "kjv-tagger")
    reference_dir = os.path.join(args.out, "reference")
    for d in (decoder_dir, classifier_dir, tagger_dir, reference_dir):
        os.makedirs(d, exist_ok=True)
    report = {"args": vars(args), "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
              "decoder": {}, "classifier": {}, "tagger": {}, "failures": []}
    sp = (sentencepiece.SentencePieceProcessor(model_file=os.path.join(args.data, "kjv_bpe.model"))
          if sentencepiece is not None else None)

    def stage(name, fn):
        t0 = time.time()
        try:
            fn()
            log(f"stage {name} done in {time.time() - t0:.1f}s")
            return True
        except Exception:
            traceback.print_exc()
            report["failures"].append({"stage": name, "error": traceback.format_exc(limit=3)})
            if not args.keep_going:
                raise
            return False

    state = {}

    def decoder_tokenizer():
        rows = read_jsonl(os.path.join(args.data, "verses.jsonl"))
        verses = [r["text"] for r in rows if r["split"] == "heldout"][:1000]
        spm_model = os.path.join(args.data, "kjv_bpe.model")
        try:
            write_decoder_tokenizer(decoder_dir, spm_model)
            check = check_decoder_tokenizer(decoder_dir, sp, verses + DECODER_PROMPTS)
        except Exception:
            traceback.print_exc()
            check = {"error": traceback.format_exc(limit=3)}
        report["decoder"]["tokenizer_check"] = check
        log(f"decoder tokenizer check (transformers conversion): {check}")
        if "error" in check or check["hf_mismatches"] or check["tokenizer_json_mismatches"]:
            write_decoder_tokenizer(decoder_dir, spm_model, fallback=True)
            check = check_decoder_tokenizer(decoder_dir, sp, verses + DECODER_PROMPTS)
            report["decoder"]["tokenizer_check_fallback"] = check
            log(f"decoder tokenizer check (own conversion): {check}")

    def decoder():
        state["windows"] = train_decoder(args, sp, report, budget, decoder_dir)
        evaluate_decoder(decoder_dir, state["windows"], report)

    def classifier():
        state["eval"] = train_classifier(args, report, budget, classifier_dir)
        evaluate_classifier(classifier_dir, *state["eval"], report)

    def tagger():
        train_tagger(args, report, budget, tagger_dir)
        evaluate_tagger(args, tagger_dir, report)

    tensors, meta = {}, {"note": "logits computed by transformers " + transformers.__version__ +
                         " (eager attention) in float64 from the exported weights, stored as float32"}

    def trained_before(model_dir):
        return os.path.exists(os.path.join(model_dir, "model.safetensors"))

    def wanted(name):
        return args.only is None or args.only == name

    if wanted("decoder"):
        stage("decoder_tokenizer", decoder_tokenizer)
    if (stage("decoder", decoder) if wanted("decoder") else trained_before(decoder_dir)):
        stage("decoder_reference", lambda: decoder_reference(decoder_dir, sp, tensors, meta))
    if (stage("classifier", classifier) if wanted("classifier") else trained_before(classifier_dir)):
        stage("classifier_reference", lambda: classifier_reference(classifier_dir, tensors, meta))
    if (stage("tagger", tagger) if wanted("tagger") else trained_before(tagger_dir)):
        stage("tagger_reference", lambda: tagger_reference(tagger_dir, tensors, meta))
    if tensors:
        save_safetensors(os.path.join(reference_dir, "reference.safetensors"), tensors)
        with open(os.path.join(reference_dir, "reference.json"), "w") as f:
            json.dump(meta, f, indent=1)

    report["files"] = {os.path.relpath(os.path.join(root, name), args.out): file_size(os.path.join(root, name))
                       for root, _, names in os.walk(args.out) for name in sorted(names)}
    report["total_seconds"] = round(budget.elapsed(), 1)
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(report, f, indent=1)
    log(f"files: {json.dumps(report['files'], indent=1)}")
    log(f"done in {budget.elapsed():.0f}s; failures: {[f['stage'] for f in report['failures']]}")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
