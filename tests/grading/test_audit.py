"""python -m specbook.grading audit: transformers' own speculative sampling, as it ships, through the checker."""
from __future__ import annotations

import pytest
import torch

from specbook.grading.__main__ import main
from specbook.grading.audit import TransformersVerifier


def test_audit_command_prints_both_verdicts(capsys):
    main(["audit", "--seeds", "1"])
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:3] for line in out.splitlines()
            if line.startswith("| transformers")}
    assert rows["transformers _speculative_sampling"] == ["1/1", "1/1"]  # lossless and standard
    assert rows["transformers _speculative_sampling, ensemble w = 0.5"] == ["0/1", "0/1"]  # lossy


def test_wrapper_calls_the_installed_function_and_keeps_the_global_rng():
    from transformers.generation import utils

    verify = TransformersVerifier()
    assert verify.speculative_sampling is utils._speculative_sampling  # the dependency's own function
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.5, 0.5]], dtype=torch.float64)
    state = torch.get_rng_state()
    out = [verify(p, q, torch.tensor([2]), torch.Generator().manual_seed(0)).tolist() for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), state)  # the caller's RNG is untouched
    assert out[0] == out[1] and out[0][0] in (0, 1)  # replayable; draft 2 (p = 0) is rejected
    g = torch.Generator().manual_seed(0)
    assert len({tuple(verify(p, q, torch.tensor([1]), g).tolist()) for _ in range(50)}) == 3  # the bonus varies: g advances


def test_bad_arguments():
    with pytest.raises(ValueError, match="ensemble_weight"):
        TransformersVerifier(1.5)
    with pytest.raises(SystemExit):
        main(["--seeds", "0", "audit"])
    with pytest.raises(SystemExit):
        main([])


def test_measurement_flags_select_checker_and_entries(capsys):
    main(["--calibration", "--checker", "check_token_rule", "--seeds", "0", "--null-reps", "2"])
    out = capsys.readouterr().out
    assert "2 replicates of the 14-test family" in out and "check_verifier" not in out
    main(["--detection-table", "--checker", "check_verifier", "--entry", "padded", "--seeds", "1",
          "--full-seeds", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| padded output")]
    assert len(rows) == 1 and "| 1/1 | 1/1 |" in rows[0]  # lossless=False and standard=False at the one seed
    with pytest.raises(SystemExit):
        main(["--detection-table", "--seeds", "0"])
