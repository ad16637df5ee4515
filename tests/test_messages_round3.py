"""Messages that named the wrong range, a decoder's internals or the wrong cause, each
quoted word for word on docs/troubleshooting.md."""

from __future__ import annotations

import pytest

from negmine_core.registry import PluginError, import_plugin
from pretrain import build, config
from pretrain.config import ConfigError
from pretrain.data import imagefiles
from tests.test_troubleshooting_data import assert_documented


@pytest.mark.parametrize("nu", ["0", "-0.5"])
def test_mioc_names_its_own_nu_range_for_every_value_outside_it(nu):
    with pytest.raises(ConfigError) as info:
        build.strategy(config.load("digits_mioc.yaml", [f"negatives.kwargs.nu={nu}"]))
    message = str(info.value)
    assert message == (
        f"negatives: nu must lie in (0, 1) for MiOC, got {float(nu)}: the share of points the "
        "one-class SVM may call outliers (the paper uses 0.01)"
    )
    assert_documented(message)


@pytest.mark.parametrize("name", ["empty.png", "empty.jpg", "empty.bmp"])
def test_a_zero_byte_image_is_called_empty(tmp_path, name):
    (tmp_path / name).write_bytes(b"")
    for read in (imagefiles.read_image, imagefiles.read_pil):
        with pytest.raises(imagefiles.BadImageError) as info:
            read(tmp_path / name)
        assert (
            str(info.value) == f"cannot read image {tmp_path / name}: the file is empty (0 bytes)"
        )
        assert_documented(str(info.value))


def test_a_folder_named_like_a_plugin_file_is_called_a_folder(tmp_path):
    (tmp_path / "x.py").mkdir()
    with pytest.raises(PluginError) as info:
        import_plugin(str(tmp_path / "x.py"))
    message = str(info.value)
    assert message == (
        f"plugin {str(tmp_path / 'x.py')!r} is a folder, not a Python file: name the .py file (or "
        "give a package as a module name, without .py)"
    )
    assert_documented(f"config key 'plugins' in the config: {message}")
