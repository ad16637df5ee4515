"""benchmarks/jpeg_quality.py recovers the quality and subsampling that PIL's encoder was given."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import jpeg_quality  # noqa: E402


@pytest.mark.parametrize(("quality", "subsampling", "name"),
                         [(75, 2, "4:2:0"), (90, 0, "4:4:4"), (30, 1, "4:2:2")])  # fmt: skip
def test_survey_recovers_what_the_encoder_was_given(tmp_path, quality, subsampling, name):
    rng = np.random.default_rng(0)
    for i in range(3):
        d = tmp_path / "train" / f"c{i}"
        d.mkdir(parents=True)
        pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(d / "a.jpg", quality=quality, subsampling=subsampling)
    qualities, samplings, n = jpeg_quality.survey(tmp_path)
    assert n == 3 and dict(qualities) == {quality: 3} and dict(samplings) == {name: 3}


def test_an_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no .jpg"):
        jpeg_quality.survey(tmp_path)
