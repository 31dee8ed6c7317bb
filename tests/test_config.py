"""gpumsg.config: one configuration object for the options the GPUMSG_* variables set.
Precedence: built-in default < configure() < environment variable; the environment is read in
one place (gpumsg/config.py)."""

from __future__ import annotations

import os
import re
import sys

import pytest

import gpumsg
from gpumsg import config as cfg
from gpumsg.backends.cuda._replays import enabled
from gpumsg.client._gil import SHORT_S, configured_interval
from gpumsg.errors import InvalidMessage
from gpumsg.service import _backpressure as backpressure

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpumsg")


def _sources() -> dict[str, str]:
    out = {}
    for folder, _dirs, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path) as fh:
                    out[os.path.relpath(path, ROOT)] = fh.read()
    return out


@pytest.fixture
def clean(monkeypatch):
    """No GPUMSG_* variable set and the default configuration, restored afterwards."""
    for variable in cfg.ENVIRONMENT.values():
        monkeypatch.delenv(variable, raising=False)
    with cfg.configured(**{name: None for name in cfg.ENVIRONMENT}):
        yield monkeypatch


def test_every_variable_is_an_option_and_read_only_in_config() -> None:
    named, readers = set(), []
    for rel, text in _sources().items():
        named.update(re.findall(r"GPUMSG_[A-Z0-9_]*[A-Z0-9]", text))
        if rel != "config.py" and re.search(r"os\.(environ|getenv)[^\n]*GPUMSG_", text):
            readers.append(rel)
    assert named - {"GPUMSG_"} <= set(cfg.ENVIRONMENT.values()), \
        named - set(cfg.ENVIRONMENT.values())
    assert len(cfg.ENVIRONMENT) == 22
    assert readers == []


def test_precedence_default_config_environment(clean) -> None:
    assert cfg.setting("GPUMSG_FFT_REPLAY") is None and enabled("GPUMSG_FFT_REPLAY")
    cfg.configure(fft_replay=False)
    assert cfg.setting("GPUMSG_FFT_REPLAY") == "0" and not enabled("GPUMSG_FFT_REPLAY")
    clean.setenv("GPUMSG_FFT_REPLAY", "1")  # the environment overrides the configuration
    assert enabled("GPUMSG_FFT_REPLAY")
    clean.delenv("GPUMSG_FFT_REPLAY")
    cfg.configure(fft_replay=None)  # None: the built-in default again
    assert enabled("GPUMSG_FFT_REPLAY")


def test_options_reach_their_readers(clean) -> None:
    assert configured_interval(True) == SHORT_S
    assert backpressure.configured() == (backpressure.HIGH, backpressure.LOW)
    cfg.configure(switch_interval=0.002, backpressure="64/16")
    assert configured_interval(True) == pytest.approx(0.002)
    assert backpressure.configured() == (64, 16)
    clean.setenv("GPUMSG_SWITCH_INTERVAL", "keep")
    clean.setenv("GPUMSG_BACKPRESSURE", "off")
    assert configured_interval(True) is None
    assert backpressure.configured() == (0, 0)


def test_a_bad_value_is_refused_where_it_is_used(clean) -> None:
    cfg.configure(switch_interval="soon")
    with pytest.raises(InvalidMessage) as info:
        configured_interval(True)
    assert info.value.field == "GPUMSG_SWITCH_INTERVAL"


def test_configure_checks_names_and_types(clean) -> None:
    with pytest.raises(InvalidMessage) as info:
        cfg.configure(blas_replays=False)
    assert info.value.field == "blas_replays"
    with pytest.raises(InvalidMessage):
        cfg.configure(blas_replay="no")
    with pytest.raises(InvalidMessage):
        cfg.configure(cache_dir=3)
    with pytest.raises(InvalidMessage):
        cfg.configure(switch_interval=True)
    assert cfg.config() == cfg.Config()
    with pytest.raises(KeyError):
        cfg.setting("GPUMSG_NO_SUCH_OPTION")


def test_configured_block_restores_and_environ_exports(clean) -> None:
    gpumsg.configure(cache_dir="/tmp/somewhere")
    with cfg.configured(blas_replay=False) as inside:
        assert inside.blas_replay is False and inside.cache_dir == "/tmp/somewhere"
        assert cfg.environ() == {"GPUMSG_BLAS_REPLAY": "0", "GPUMSG_CACHE_DIR": "/tmp/somewhere"}
    assert cfg.config().blas_replay is None
    assert cfg.environ() == {"GPUMSG_CACHE_DIR": "/tmp/somewhere"}
    assert isinstance(cfg.config(), gpumsg.Config)
    with pytest.raises(AttributeError):
        cfg.config().cache_dir = "x"  # frozen


def test_a_configured_option_applies_to_a_device(clean, backend) -> None:
    cfg.configure(switch_interval="keep")
    before = sys.getswitchinterval()
    with gpumsg.open_device(0, backend=backend):
        assert sys.getswitchinterval() == before
