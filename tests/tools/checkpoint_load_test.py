#!/usr/bin/env python3
"""Checkpoints load as models, in transformers and PEFT themselves.

`sbp train` fine-tunes a tiny Qwen3 model (examples/configs/tiny-chat-qwen3.json,
with the test tokenizer tests/tokenizer/tiny-bpe) on the shipped chat example
(examples/data/tiny-chat.tokens.jsonl) for a few steps, once in full and once
with LoRA. Then:
  - AutoModelForCausalLM and AutoTokenizer load the full run's checkpoint
    directory as it is, and through checkpoints/latest, and generate;
  - PEFT's AutoPeftModelForCausalLM loads the LoRA run's adapter from another
    working directory (its base model is named by an absolute path);
  - `sbp export` of the LoRA run is a plain model whose logits equal the PEFT
    model's, merged and unmerged, within fp32 tolerance.

Needs the project environment .venv (scripts/bootstrap --python: torch,
transformers, peft) and a built sbp ($SBP_CLI, default build/bin/sbp).
.ci/run runs it:
    .venv/bin/python tests/tools/checkpoint_load_test.py
"""
import json
import os
import shutil
import tempfile
import unittest

# Everything loads from local directories: a Hub lookup would be a failure.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
from peft import AutoPeftModelForCausalLM, PeftModel  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()

from sbp_cli import ROOT, run  # noqa: E402

DATA = os.path.join(ROOT, "examples", "data", "tiny-chat.tokens.jsonl")
TOKENIZER = os.path.join(ROOT, "tests", "tokenizer", "tiny-bpe")

SPEC = """name: {name}
objective: sft
model: model
data: {data}
seq_len: 128
streambp: {{mode: stream, chunk_tokens: 32, logits_chunk_tokens: 32}}
train: {{steps: 4, sequences_per_step: 4, lr: 1.0e-2, seed: 1}}
checkpoint: {{every_steps: 2}}
"""
LORA = "lora: {r: 4, alpha: 8, target_modules: [q_proj, k_proj, v_proj, o_proj, down_proj]}\n"

# What transformers and PEFT read; everything else of a step directory must
# be the resume state's subfolder.
MODEL_FILES = {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
               "tokenizer_config.json"}
ADAPTER_FILES = {"adapter_config.json", "adapter_model.safetensors", "generation_config.json",
                 "tokenizer.json", "tokenizer_config.json"}


class CheckpointLoadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sbp_checkpoint_load_")
        config = os.path.join(ROOT, "examples", "configs", "tiny-chat-qwen3.json")
        run(["model", "init", "--config", config, "--seed", "1", "--out", "model"], cls.dir)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(TOKENIZER, name), os.path.join(cls.dir, "model", name))
        for name, extra in (("full", ""), ("lora", LORA)):
            with open(os.path.join(cls.dir, f"{name}.yaml"), "w") as f:
                f.write(SPEC.format(name=name, data=DATA) + extra)
            run(["train", f"{name}.yaml"], cls.dir)
        cls.full = os.path.join(cls.dir, "runs", "full", "checkpoints")
        cls.lora = os.path.join(cls.dir, "runs", "lora", "checkpoints")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_full_checkpoint_loads_as_is_and_generates(self):
        step = os.path.join(self.full, "step-00000004")
        self.assertEqual(set(os.listdir(step)), MODEL_FILES | {"trainer_state"})
        self.assertEqual(os.readlink(os.path.join(self.full, "latest")), "step-00000004")
        prompt = "<|im_start|>user\nreverse: one two<|im_end|>\n<|im_start|>assistant\n"
        outputs = []
        for path in (step, os.path.join(self.full, "latest")):
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path)
            inputs = tokenizer(prompt, return_tensors="pt")
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=5, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id)
            self.assertEqual(out.shape[1], inputs["input_ids"].shape[1] + 5)
            self.assertIsInstance(tokenizer.decode(out[0]), str)
            outputs.append(out)
        self.assertTrue(torch.equal(outputs[0], outputs[1]))

    def test_peft_loads_the_adapter_from_another_directory(self):
        step = os.path.join(self.lora, "step-00000004")
        self.assertEqual(set(os.listdir(step)), ADAPTER_FILES | {"trainer_state"})
        with open(os.path.join(step, "adapter_config.json")) as f:
            self.assertTrue(os.path.isabs(json.load(f)["base_model_name_or_path"]))
        elsewhere = tempfile.mkdtemp(prefix="sbp_elsewhere_")
        cwd = os.getcwd()
        try:
            os.chdir(elsewhere)
            model = AutoPeftModelForCausalLM.from_pretrained(os.path.join(self.lora, "latest"))
        finally:
            os.chdir(cwd)
            shutil.rmtree(elsewhere, ignore_errors=True)
        self.assertIsInstance(model, PeftModel)
        with torch.no_grad():
            self.assertTrue(torch.isfinite(model(torch.tensor([[1, 52, 71]])).logits).all())

    def test_export_of_a_lora_run_is_a_plain_model_with_the_merged_logits(self):
        out = os.path.join(self.dir, "exported")
        summary = json.loads(run(["export", "runs/lora", "--out", out], self.dir).stdout)
        self.assertTrue(summary["lora"])
        self.assertEqual(set(os.listdir(out)), MODEL_FILES)
        exported = AutoModelForCausalLM.from_pretrained(out)
        self.assertNotIsInstance(exported, PeftModel)
        AutoTokenizer.from_pretrained(out)
        peft = AutoPeftModelForCausalLM.from_pretrained(os.path.join(self.lora, "latest"))
        with open(DATA) as f:
            ids = torch.tensor([json.loads(f.readline())["input_ids"][:48]])
        with torch.no_grad():
            logits = exported(ids).logits
            adapted = peft(ids).logits
            merged = peft.merge_and_unload()(ids).logits
        base = AutoModelForCausalLM.from_pretrained(os.path.join(self.dir, "model"))
        with torch.no_grad():
            self.assertGreater((base(ids).logits - logits).abs().max().item(), 1e-3)
        torch.testing.assert_close(logits, merged, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(logits, adapted, rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
    unittest.main()
