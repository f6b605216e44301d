"""scripts/bench/mjlab_probe.py's bad input, which it refuses before mjlab loads: one line, exit 2,
nothing written; and how it calls an export whose batch is fixed. (The probe itself runs in CI's
mjlab environment: the relay-window test.)"""

from __future__ import annotations

import pytest
from bench_support import run_module


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["{a}", "{b}", "--json", "{out}"], "--json: got 1 files for 2 policies; give one each"),
        (["{a}", "{missing}"], "{missing}: no such ONNX file or run directory"),
        # A run directory is exported first: one that holds no checkpoint stops there.
        (
            ["{run}", "--task", "T"],
            "{run}: no checkpoint found (expected {run}/checkpoints/latest.pt)",
        ),
        (["{a}"], "--task: {a} has no export JSON naming its task; give --task"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, line):
    paths = {k: tmp_path / f"{k}.onnx" for k in ("a", "b", "missing")}
    paths["out"] = tmp_path / "probe.json"
    paths["run"] = tmp_path / "run"
    paths["run"].mkdir()
    paths["a"].write_bytes(b"")
    paths["b"].write_bytes(b"")
    done = run_module("scripts.bench.mjlab_probe", *(a.format(**paths) for a in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"scripts.bench.mjlab_probe: error: {line.format(**paths)}"
    assert not paths["out"].exists()


def linear_policy(path, batch, weight):
    """An ONNX policy `obs @ weight` built by hand, its rows fixed at `batch` (None: any)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rows = batch if batch is not None else "batch"
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "w"], ["actions"])],
        "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [rows, weight.shape[0]])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [rows, weight.shape[1]])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("batch", [None, 1, 2])
def test_every_robot_gets_its_own_action_whatever_batch_the_export_fixed(tmp_path, batch):
    # rsl_rl's ONNX files take one row: the probe of 2 robots used to stop at their first step.
    import numpy as np

    from scripts.bench.mjlab_probe import batched

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((5, 3)).astype(np.float32)
    obs = rng.standard_normal((4, 5)).astype(np.float32)
    session = linear_policy(tmp_path / "p.onnx", batch, weight)
    actions = batched(session, 4)({"obs": obs})
    assert actions.shape == (4, 3)
    np.testing.assert_allclose(actions, obs @ weight, rtol=1e-5, atol=1e-6)


def test_a_robot_count_the_fixed_batch_does_not_divide_is_one_line(tmp_path):
    import numpy as np

    from scripts.bench.lib.args import BadInput
    from scripts.bench.mjlab_probe import batched

    session = linear_policy(tmp_path / "p.onnx", 3, np.ones((5, 3), np.float32))
    with pytest.raises(BadInput, match=r"^--envs 4: p.onnx takes batches of 3; give a multiple"):
        batched(session, 4, "p.onnx")
