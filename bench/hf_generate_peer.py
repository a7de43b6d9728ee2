#!/usr/bin/env python3
"""The CPU peer of `sbp generate` in bench/generate_compare.sh: Hugging Face
transformers' generate() with its KV cache on the same model directory and
prompts, fp32, SDPA attention, greedy (or sampling with --temperature), every
sequence of the batch decoded together for exactly --max-new-tokens tokens
(no EOS). Prints one JSON line:

  {"peer": "hf", "batch", "prompt_tokens", "new_tokens", "seconds",
   "tokens_per_second", "rss_peak_bytes", "torch", "transformers", "threads",
   "completions": [[ids...], ...] (with --keep-ids)}

  .venv/bin/python bench/hf_generate_peer.py --model DIR --prompts FILE --max-new-tokens 1024
"""
import argparse
import json
import resource
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", required=True, help="JSONL with prompt_ids (equal lengths)")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--keep-ids", action="store_true")
    args = p.parse_args()

    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    prompts = [json.loads(line)["prompt_ids"] for line in open(args.prompts) if line.strip()]
    if len({len(x) for x in prompts}) != 1:
        raise SystemExit("hf_generate_peer: prompts must have one length (no padding)")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    ids = torch.tensor(prompts, dtype=torch.long)
    config = transformers.GenerationConfig(
        max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
        do_sample=args.temperature > 0, temperature=args.temperature or None, top_p=None,
        top_k=None, num_beams=1, use_cache=True, eos_token_id=None, pad_token_id=0)
    with torch.inference_mode():
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
        seconds = time.perf_counter() - start
    new = out[:, ids.shape[1]:]
    line = {"peer": "hf", "batch": len(prompts), "prompt_tokens": ids.numel(),
            "new_tokens": new.numel(), "seconds": round(seconds, 3),
            "tokens_per_second": round(new.numel() / seconds, 1),
            "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads()}
    if args.keep_ids:
        line["completions"] = new.tolist()
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
