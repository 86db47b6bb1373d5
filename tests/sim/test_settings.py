"""The `sim:` settings: errors that name the key, catalogue additions from the config, flags over the file."""

from __future__ import annotations

import pytest

from firsttoken import config
from firsttoken.config import ConfigError, sim_settings


def test_defaults_describe_themselves() -> None:
    settings = sim_settings({"region": "aws:us-east-1", "client_location": "lagos"})
    assert settings.describe().startswith("llama-3.1-8b at bf16 on h100 in aws:us-east-1 (")
    assert "seen from Lagos, NG" in settings.describe()


@pytest.mark.parametrize("tree, words", [
    ({"gpu": "h10"}, ["sim:", "unknown gpu 'h10'", "h100"]),
    ({"models": ["llama-3.1-8"]}, ["unknown model", "llama-3.1-8b"]),
    ({"gpus": "h100"}, ["unknown key 'sim.gpus'", "known keys here:", "gpu"]),
    ({"replicas": 0}, ["sim.replicas"]),
    ({"client_location": "lagoss"}, ["client_location: unknown place", "Lagos, NG"]),
    ({"models": ["llama-3.1-405b"], "tp": 1}, ["does not fit"]),
    ({"catalogue": {"gpus": {"b200": {"memory_gb": 180}}}}, ["gpus.b200", "missing field"]),
])
def test_errors_name_the_key(tree: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as error:
        sim_settings(tree)
    for word in words:
        assert word in str(error.value)


def test_catalogue_additions_and_efficiencies_from_the_file(tmp_path) -> None:
    path = tmp_path / "firsttoken.yaml"
    path.write_text("sim:\n  gpu: b200\n  efficiency: {decode_bandwidth: 0.7}\n"
                    "  catalogue:\n    gpus:\n      b200: {memory_gb: 180, bandwidth_tb_s: 8.0, bf16_tflops: 2250}\n")
    settings = config.load(path)
    deployment = settings.sim.deployments["llama-3.1-8b"]
    assert deployment.gpu.bandwidth_tb_s == 8.0 and deployment.efficiency.decode_bandwidth == 0.7
    merged = sim_settings({**config.sim_tree(settings), "tp": 2})  # flags over the file
    assert merged.gpu == "b200" and merged.tp == 2 and merged.efficiency.decode_bandwidth == 0.7
    assert config.sim_tree(config.validate({})) == {}
