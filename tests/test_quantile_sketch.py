"""The project's copy of Beam's quantile sketch (transforms/preprocess/quantile_sketch.py) gives
Beam's own results: the same operations on both (batches of random sizes, merges of sketches
built apart, accumulators pickled as workers send them, the alternating rounding carried
across), the same outputs, compared exactly."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
from apache_beam.transforms.stats import ApproximateQuantilesCombineFn

from transforms.preprocess.quantile_sketch import QuantileSketch


def _values(rng: random.Random, n: int, kind: str) -> list:
    if kind == "ints with ties":
        return [rng.randrange(-50, 50) for _ in range(n)]
    if kind == "floats":
        return [rng.gauss(0.0, 1e3) for _ in range(n)]
    if kind == "signed zeros":  # equal values that differ: which one is picked shows
        return [rng.choice([-0.0, 0.0, -0.0, 0.0, 1.0, -1.0]) for _ in range(n)]
    if kind == "skewed":
        return [rng.lognormvariate(0.0, 2.0) for _ in range(n)]
    return [float(i) for i in range(n)]  # sorted


def _run(fn, script: list) -> list:
    """Replay `script` on the sketch `fn`: a list of sketches, each a list of batches; a
    sketch is built from its batches, every other one pickled and read back (as a worker sends
    it), then they are merged in groups and the groups merged again."""
    fn_is_ours = isinstance(fn, QuantileSketch)
    built = []
    for i, batches in enumerate(script):
        acc = fn.create_accumulator()
        for batch in batches:  # Beam's takes lists, the project's numpy arrays
            acc = fn.add_input(acc, np.asarray(batch) if fn_is_ours else list(batch))
        if i % 2:
            acc = pickle.loads(pickle.dumps(acc))
        built.append(acc)
    groups = [fn.merge_accumulators(built[i : i + 3]) for i in range(0, len(built), 3)]
    return fn.extract_output(fn.merge_accumulators(groups))


@pytest.mark.parametrize("epsilon", [0.1, 0.01])
@pytest.mark.parametrize("num_quantiles", [2, 3, 5, 11])
@pytest.mark.parametrize("kind", ["ints with ties", "floats", "skewed", "sorted", "signed zeros"])
def test_the_same_quantiles_as_beam(epsilon, num_quantiles, kind):
    rng = random.Random(hash((epsilon, num_quantiles, kind)) & 0xFFFF)
    script = []
    for _ in range(rng.randrange(1, 9)):
        batches = []
        for _ in range(rng.randrange(0, 6)):
            batches.append(_values(rng, rng.choice([0, 1, 7, 119, 120, 121, 2_000, 9_000]), kind))
        script.append(batches)
    beam = ApproximateQuantilesCombineFn.create(
        num_quantiles=num_quantiles, epsilon=epsilon, input_batched=True
    )
    ours = QuantileSketch.create(num_quantiles=num_quantiles, epsilon=epsilon)
    assert (ours._buffer_size, ours._num_buffers) == (
        beam._spec.buffer_size,
        beam._spec.num_buffers,
    )
    expected = _run(beam, script)
    got = _run(ours, script)
    assert [repr(v) for v in got] == [repr(v) for v in expected]  # -0.0 is not 0.0 here


def test_the_same_quantiles_as_beam_at_the_jobs_epsilon():
    """The epsilon of `bucketize` and of a median fill (0.001): buffers of 15,259 values, 17 of
    them before the first collapse; 700,000 values in three sketches collapse several times."""
    rng = np.random.default_rng(7)
    script = [
        [rng.normal(size=150_000).tolist(), rng.integers(0, 1000, 100_000).tolist()],
        [rng.exponential(size=300_000).tolist()],
        [rng.normal(5.0, 1.0, size=150_000).tolist()],
    ]
    for num_quantiles in (2, 11):
        beam = ApproximateQuantilesCombineFn.create(
            num_quantiles=num_quantiles, epsilon=0.001, input_batched=True
        )
        ours = QuantileSketch.create(num_quantiles=num_quantiles, epsilon=0.001)
        assert ours._buffer_size == 15_259 and ours._num_buffers == 17
        assert _run(ours, script) == _run(beam, script)


def test_one_sketch_used_for_many_fits_keeps_beams_rounding():
    """The rounding of an even collapse alternates per sketch object, across every state it
    touches, as Beam's does: one object used twice gives Beam's second answer too."""
    rng = random.Random(3)
    script = [[_values(rng, 1_000, "floats") for _ in range(4)] for _ in range(5)]
    beam = ApproximateQuantilesCombineFn.create(num_quantiles=5, epsilon=0.1, input_batched=True)
    ours = QuantileSketch.create(num_quantiles=5, epsilon=0.1)
    assert [_run(ours, script), _run(ours, script)] == [_run(beam, script), _run(beam, script)]
    again = pickle.loads(pickle.dumps(ours))  # a fresh rounding, as Beam's pickled CombineFn
    assert _run(again, script) == _run(pickle.loads(pickle.dumps(beam)), script)


def test_ints_then_floats_keep_their_types_as_in_beam():
    """A column read as ints in one batch and floats in another: Beam's lists keep each
    value's type, and so does the sketch (numpy would make the ints floats)."""
    rng = random.Random(11)
    ints = [rng.randrange(-1000, 1000) for _ in range(500)]
    floats = [rng.uniform(-1000, 1000) for _ in range(500)]
    script = [[ints, floats], [floats[:130], ints[:300]], [ints[::-1]]]
    for num_quantiles in (2, 7):
        beam = ApproximateQuantilesCombineFn.create(
            num_quantiles=num_quantiles, epsilon=0.1, input_batched=True
        )
        ours = QuantileSketch.create(num_quantiles=num_quantiles, epsilon=0.1)
        expected = _run(beam, script)
        got = _run(ours, script)
        assert got == expected
        assert [type(v) for v in got] == [type(v) for v in expected]
        assert {type(v) for v in got} == {int, float}


def test_empty_and_tiny_inputs():
    ours = QuantileSketch.create(num_quantiles=4, epsilon=0.01)
    assert ours.extract_output(ours.create_accumulator()) == []
    acc = ours.add_input(ours.create_accumulator(), np.array([]))
    assert ours.extract_output(acc) == []
    acc = ours.add_input(ours.create_accumulator(), np.array([3.0, 1.0]))
    assert ours.extract_output(acc) == [1.0, 1.0, 3.0, 3.0]
    merged = ours.merge_accumulators([ours.create_accumulator(), acc])
    assert ours.extract_output(merged) == [1.0, 1.0, 3.0, 3.0]


def test_many_small_random_scripts_as_beam():
    """Two hundred random scripts at epsilon 0.1 (buffers of 120 values, 24 of them): small
    sketches whose merges and outputs interpolate buffers of mixed weights, where a position
    can fall exactly on a running weight (Beam takes the next value there)."""
    rng = random.Random(2026)
    for _ in range(200):
        kind = rng.choice(["ints with ties", "floats", "signed zeros"])
        script = [
            [_values(rng, rng.randrange(0, 700), kind) for _ in range(rng.randrange(1, 4))]
            for _ in range(rng.randrange(1, 12))
        ]
        num_quantiles = rng.choice([2, 3, 4, 5, 8, 10])
        beam = ApproximateQuantilesCombineFn.create(
            num_quantiles=num_quantiles, epsilon=0.1, input_batched=True
        )
        ours = QuantileSketch.create(num_quantiles=num_quantiles, epsilon=0.1)
        expected = _run(beam, script)
        assert [repr(v) for v in _run(ours, script)] == [repr(v) for v in expected]
