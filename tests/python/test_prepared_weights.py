"""Prepared weights without a GPU: the class and its counter exported, and Engine.prepare_weights
checking the weight array against the description before anything runs (shape, dtype, device)."""
import numpy as np
import pytest

import conv3djit
from conv3djit import Conv3dDesc

DESC = Conv3dDesc((2, 16, 4, 6, 8), 32, 3, padding=1)  # weight (32, 16, 3, 3, 3), float32


def test_class_and_counter_are_exported(engine):
    assert "PreparedWeights" in conv3djit.__all__
    with pytest.raises(TypeError):
        conv3djit.PreparedWeights()  # made only by Engine.prepare_weights
    stats = engine.stats()
    assert stats.prepared_weight_reads == 0
    assert "prepared_weight_reads=0" in repr(stats)


@pytest.mark.parametrize("weight,error,pattern", [
    (np.zeros((32, 16, 3, 3, 2), np.float32), conv3djit.InvalidArgument,
     r"weight: shape \(32, 16, 3, 3, 2\) does not match the description, which needs \(32, 16, 3, 3, 3\)"),
    (np.zeros((32, 16, 3, 3, 3), np.float64), conv3djit.InvalidArgument,
     r"weight: dtype float64, but the call needs float32"),
    (np.zeros((32, 16, 3, 3, 3), np.float32), conv3djit.Unsupported, r"weight: on cpu: conv3djit runs on CUDA arrays"),
])
def test_the_weight_is_checked_first(engine, weight, error, pattern):
    with pytest.raises(error, match=pattern):
        engine.prepare_weights(DESC, weight)
