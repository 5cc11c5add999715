"""The activation predictor: shipped table, physical monotonicity, roofline types, calibration from traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optsched.predict.activation import ActivationPredictor, ModelSpec, resolve_type
from optsched.predict.activation_calibrate import calibrate

SPEC_8B = ModelSpec(params_b=8.0, memory_gib=18.5)
SPEC_70B = ModelSpec(params_b=70.6, memory_gib=43.0)


def test_shipped_table_has_table_and_roofline_types() -> None:
    p = ActivationPredictor.default()
    sources = {t: c.source for t, c in p.types.items()}
    assert sources["h100"] == "table:vidur" and sources["a100"] == "table:vidur"
    assert sources["l40s"] == "roofline" and sources["a10g"] == "roofline"
    card = p.table["card"]
    assert set(card["leave_one_gpu_out"]) == {"a100", "a40", "h100"}
    assert all(v["roofline_mape"] >= 0 for v in card["leave_one_gpu_out"].values())


def test_latency_is_monotone_and_faster_on_faster_gpus() -> None:
    p = ActivationPredictor.default()
    for t in ("h100", "a100", "l40s", "a10g"):
        assert p.latency_s(SPEC_8B, 1000, 200, t) < p.latency_s(SPEC_8B, 2000, 200, t)
        assert p.latency_s(SPEC_8B, 1000, 200, t) < p.latency_s(SPEC_8B, 1000, 400, t)
        assert p.latency_s(SPEC_8B, 1000, 200, t) < p.latency_s(SPEC_70B, 1000, 200, t)
    assert p.latency_s(SPEC_8B, 1000, 200, "h100") < p.latency_s(SPEC_8B, 1000, 200, "a100")
    assert p.latency_s(SPEC_8B, 1000, 200, "a100") < p.latency_s(SPEC_8B, 1000, 200, "a10g")


def test_decode_time_is_in_a_measured_range() -> None:
    # Splitwise: Llama2-70B TP8 on H100 ~31 ms/token; one 8B fp16 model on one H100 decodes
    # in roughly 7-20 ms/token end to end.
    p = ActivationPredictor.default()
    per_token = p.decode_s(SPEC_8B, 100, 1000, "h100") / 100
    assert 0.004 < per_token < 0.03


def test_batched_decode_is_cheaper_than_sequential() -> None:
    p = ActivationPredictor.default()
    one = p.decode_s(SPEC_8B, 200, 1000, "a100")
    four = p.decode_s(SPEC_8B, 200, 1000, "a100", batch=4)
    assert one < four < 4 * one


def test_load_time_scales_with_size_and_loader() -> None:
    p = ActivationPredictor.default()
    assert p.load_s(SPEC_8B, "sllm") < p.load_s(SPEC_8B, "safetensors")
    assert p.load_s(SPEC_8B) < p.load_s(SPEC_70B)
    assert p.load_s(SPEC_8B, speedup=10) == pytest.approx(p.load_s(SPEC_8B) / 10)


def test_peak_memory_is_weights_plus_kv() -> None:
    p = ActivationPredictor.default()
    assert p.peak_memory_gib(SPEC_8B, 0, 0) < p.peak_memory_gib(SPEC_8B, 4000, 1000)


def test_type_aliases() -> None:
    known = ("h100", "a100", "l40s")
    assert resolve_type("H100", known) == "h100"
    assert resolve_type("A100_80GB", known) == "a100"
    with pytest.raises(KeyError):
        resolve_type("tpu", known)


def _fake_traces(root: Path) -> Path:
    """A miniature trace folder in the real layouts, with linear ground truth."""
    vid = root / "vidur_profiling"
    vid.mkdir(parents=True)
    rows = ["gpu,model,num_layers,tensor_parallel,num_tokens,per_layer_linear_ms,emb_ms,model_linear_ms"]
    speeds = {"a100": 1.0, "h100": 0.6, "a40": 2.0}
    models = {
        "meta-llama/Llama-2-7b-hf": 6.74,
        "internlm/internlm-20b": 20.0,
        "meta-llama/Llama-2-70b-hf": 69.0,
    }
    for gpu, f in speeds.items():
        for m, pb in models.items():
            for tp in (1, 2, 4, 8):
                for n in (1, 256, 512, 1024, 2048):
                    ms = f * (0.5 + 0.6 * 2 * pb / tp) if n == 1 else f * (5 + 0.004 * 2 * pb * n / tp)
                    rows.append(f"{gpu},{m},32,{tp},{n},0,0,{ms}")
    (vid / "linear_ops_latency_summary.csv").write_text("\n".join(rows) + "\n")
    specs = root / "gpu_specs_llm_analysis"
    specs.mkdir()
    for name, bw, tf, mem in (
        ("a100-sxm-80gb", 2039, 312, 80),
        ("h100-sxm-80gb", 3350, 989, 80),
        ("a10g-pcie-24gb", 600, 70, 24),
    ):
        (specs / f"{name}.json").write_text(
            json.dumps({"mem_per_GPU_in_GB": mem, "hbm_bandwidth_in_GB_per_sec": bw, "peak_fp16_TFLOPS": tf})
        )
    sw = root / "splitwise_perf_model"
    sw.mkdir()
    lines = [
        "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,"
        "prompt_time,token_time,e2e_time,tensor_parallel"
    ]
    for hw, f in (("a100-80gb", 1.0), ("h100-80gb", 0.6)):
        for tp in (2, 4, 8):
            for prompt in (256, 512):
                pt = 1.5 * f * (5 + 0.004 * 2 * 69 * prompt / tp)
                tt = 2.0 * f * (0.5 + 0.6 * 2 * 69 / tp)
                lines.append(f"llama2-70b,{hw},{prompt},1,128,1,1,{pt},{tt},0,{tp}")
    (sw / "perf_model.csv").write_text("\n".join(lines) + "\n")
    ld = root / "serverlessllm_loading" / "h100_2025" / "random"
    ld.mkdir(parents=True)
    for stem, gb in (("meta-llama_Llama-3.1-8B-Instruct", 16.06), ("Qwen_Qwen3-32B", 65.5)):
        for loader, rate in (("sllm", 20.0), ("safetensors", 3.0)):
            (ld / f"{stem}_{loader}_30_random.json").write_text(
                json.dumps([{"loading_time": gb / rate + 0.1}] * 3)
            )
    return root


def test_calibration_recovers_known_coefficients(tmp_path: Path) -> None:
    table = calibrate(_fake_traces(tmp_path))
    a100 = table["types"]["a100"]
    assert a100["dec_ms_per_gb"] == pytest.approx(0.6, rel=1e-3)
    assert a100["pf_ms_per_gflop"] == pytest.approx(0.004, rel=1e-3)
    assert table["e2e_prefill"] == pytest.approx(1.5, rel=0.05)
    assert table["e2e_decode"] == pytest.approx(2.0, rel=0.05)
    assert table["load_gb_s"]["safetensors"] == pytest.approx(3.0, rel=1e-3)
    assert table["load_fixed_s"]["sllm"] == pytest.approx(0.1, abs=1e-3)
    assert table["types"]["l40s"]["source"] == "roofline"
    assert "lightgbm_mape" in table["card"]["leave_one_model_out"]["internlm/internlm-20b"]
