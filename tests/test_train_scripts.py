"""scripts/train.py (run dir, checkpoints, --stop-after/--resume equals a straight
run) and scripts/evaluate.py (files, pairing, refusal of a mismatched policy)."""
import csv
import json

import numpy as np

from rlbm_jax.cli import evaluate as evaluate_cli, train as train_cli
from rlbm_jax.env import formulations
from rlbm_jax.evaluate import paired_diff
from rlbm_jax.policy import save_policy

LAYOUT = formulations.get("RLBM-thesis-v0").obs_layout(2)

TINY = ["--num-envs", "4", "--num-steps", "3", "--updates", "4", "--num-minibatches", "2", "--episode-s", "0.5",
        "--buffer-pkts", "20", "60", "--checkpoint-every", "2", "--num-seeds", "2"]


def rows(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def test_train_stop_and_resume_equals_straight_run(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    # without the bar's callback the straight run and the two halves compile one program,
    # which XLA's persistent cache (tests/conftest.py) keeps for the others (the bar itself:
    # tests/test_first_run.py)
    assert train_cli.main(["--run-dir", str(a), *TINY, "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "train [" not in err and "warning" not in err  # a short CPU run is not warned about
    # the tick that ran, not "auto", in the config and the banner
    ran = json.loads((a / "config.json").read_text())["backend"]
    assert ran in ("jax", "native") and f"simulator backend {ran}" in err
    assert train_cli.main(["--run-dir", str(b), *TINY, "--stop-after", "2", "--no-progress"]) == 0
    assert not (b / "policy").exists()
    assert train_cli.main(["--run-dir", str(b), "--resume", "--no-progress"]) == 0
    assert "train [" not in capsys.readouterr().err
    for name in ("config.json", "metrics.csv", "curves.png", "policy/policy.json", "policy_seed1/policy.npz"):
        assert (a / name).is_file(), name
    assert len(rows(a / "metrics.csv")) == 2 * 4
    assert rows(a / "metrics.csv") == rows(b / "metrics.csv")
    wa, wb = np.load(a / "policy_seed1" / "policy.npz"), np.load(b / "policy_seed1" / "policy.npz")
    for k in wa.files:
        np.testing.assert_array_equal(wa[k], wb[k])
    wc = np.load(a / "policy_seed0" / "policy.npz")
    assert not np.array_equal(wa["w0"], wc["w0"])  # the two seeds are independent runs


def test_train_rejects_bad_config(tmp_path, capsys):
    assert train_cli.main(["--run-dir", str(tmp_path / "x"), "--num-envs", "0"]) == 2
    err = capsys.readouterr().err
    assert "--num-envs must be an integer >= 1" in err and "PPOConfig" not in err and "num_envs" not in err
    assert train_cli.main(["--run-dir", str(tmp_path / "y"), "--load", "0.5", "0.1"]) == 2
    assert "--load range" in capsys.readouterr().err
    assert train_cli.main(["--run-dir", str(tmp_path / "z"), "--init-action", "4", "1", "2"]) == 2
    assert "--init-action has 3 values" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()  # refused before the run directory is written


def test_train_takes_one_init_action_per_class():
    cfg, _ = train_cli.config_from_args(train_cli.parse(["--init-action", "4", "0.5"]))
    assert cfg.init_action == (4.0, 0.5)
    cfg, _ = train_cli.config_from_args(train_cli.parse(["--init-action", "2"]))
    assert cfg.init_action == 2.0


def test_train_records_the_tcp_model_and_resumes_an_older_run_on_its_own():
    from rlbm_jax.env.params import LEGACY_TCP_MODEL

    _, env_cfg = train_cli.config_from_args(train_cli.parse([]))
    assert {k: env_cfg[k] for k in LEGACY_TCP_MODEL} == {"rto_recovery": "go-back-n", "rtt_samples": "cumulative"}
    _, env_cfg = train_cli.config_from_args(train_cli.parse(["--rto-recovery", "sack"]))
    assert train_cli.tcp_model(env_cfg)["rto_recovery"] == "sack"
    # a run config written before the choice existed was made with the model of that version
    older = {k: v for k, v in env_cfg.items() if k not in (*LEGACY_TCP_MODEL, "prr", "prr_ssrb", "ecn_cwr", "rto_rearm",
                                                       "red_syn")}
    untouched = {"prr": "exact", "prr_ssrb": "rfc6937", "ecn_cwr": "open",  # the defaults they were added with
                 "bbr_rate_sample": "exact", "rtt_clock": "exact", "long_flow_syn": "base-rtt", "sack_credit": "off"}
    assert train_cli.tcp_model(older) == {**LEGACY_TCP_MODEL, **untouched, "rto_rearm": "any-ack", "red_syn": "base"}
    env, ep = train_cli.make_env(older)
    assert int(ep.env.sim.rto_recovery_id) == 1 and int(ep.env.sim.rtt_samples_id) == 1
    assert int(ep.env.sim.rto_rearm_id) == 1  # before the timer's choice existed: any ACK restarted it
    assert int(ep.env.sim.red_syn_id) == 1  # before 0.5: RED dropped a SYN with its base probability
    assert env_cfg["red_syn"] == "count" and int(train_cli.make_env(env_cfg)[1].env.sim.red_syn_id) == 0
    assert env_cfg["rto_rearm"] == "cumulative" and int(train_cli.make_env(env_cfg)[1].env.sim.rto_rearm_id) == 0
    assert int(ep.env.sim.prr_id) == 0  # before the PRR choice existed: exact
    assert int(ep.env.sim.ecn_cwr_id) == 0  # before the CWR choice existed: from OPEN only
    assert int(ep.env.sim.prr_ssrb_id) == 0  # before the bound's choice existed: RFC 6937's
    # one written after the go-back-N model but before the PRR and CWR choices keeps its
    # model and runs exact PRR and CWR from OPEN
    before_prr = {k: v for k, v in env_cfg.items() if k not in ("prr", "prr_ssrb", "ecn_cwr", "rto_rearm", "red_syn")}
    assert train_cli.tcp_model(before_prr) == {"rto_recovery": "sack", "rtt_samples": "cumulative", **untouched,
                                               "rto_rearm": "any-ack", "red_syn": "base"}
    _, env_cfg = train_cli.config_from_args(train_cli.parse(["--prr", "ns-3.37", "--ecn-cwr", "ns-3.37"]))
    assert env_cfg["prr"] == "ns-3.37" and env_cfg["ecn_cwr"] == "ns-3.37" and env_cfg["prr_ssrb"] == "rfc6937"
    sim_params = train_cli.make_env(env_cfg)[1].env.sim
    assert int(sim_params.prr_id) == 1 and int(sim_params.ecn_cwr_id) == 1 and int(sim_params.prr_ssrb_id) == 0
    _, env_cfg = train_cli.config_from_args(train_cli.parse(["--prr-ssrb", "ns-3.37"]))
    assert env_cfg["prr_ssrb"] == "ns-3.37" and train_cli.tcp_model(env_cfg)["prr_ssrb"] == "ns-3.37"
    sim_params = train_cli.make_env(env_cfg)[1].env.sim
    assert int(sim_params.prr_ssrb_id) == 1 and ("prr_ssrb", "ns-3.37") in sim_params.model_choices


def test_evaluate_writes_table_and_pairs_seeds(tmp_path):
    pol = tmp_path / "const"
    # a constant policy: zero weights, bias 0 -> exp2 map gives alpha = 1/16 for both classes
    save_policy(pol, [(np.zeros((10, 2)), np.zeros(2))], obs_mean=np.zeros(10), obs_std=np.ones(10),
                obs_layout=LAYOUT, formulation="RLBM-thesis-v0", num_classes=2, action_map="exp2")
    out = tmp_path / "res"
    args = ["--policy", str(pol), "--baselines", "sb-naive", "abm", "--tcp", "cubic", "--buffer-pkts", "100",
            "--load", "0.9", "--seeds", "2", "--seconds", "2", "--out", str(out)]
    assert evaluate_cli.main(args) == 0
    res = list(csv.DictReader(open(out / "results.csv")))
    assert {r["policy"] for r in res} == {"rl", "sb-naive", "abm"}
    assert (out / "grid_cubic.png").is_file() and (out / "summary.md").is_file()
    assert (out / "command.txt").read_text().startswith("python scripts/evaluate.py --policy")
    # the same flows for every policy in a cell (arrivals depend on the seed only)
    started = {float(r["flows_started"]) for r in res}
    assert len(started) == 1 and started.pop() > 0
    # every run is kept: per_seed.csv has one row per policy and seed, and its means are results.csv's
    runs = list(csv.DictReader(open(out / "per_seed.csv")))
    assert sorted((r["policy"], int(r["seed"])) for r in runs) == sorted(
        (p, s) for p in ("rl", "sb-naive", "abm") for s in (100_000, 100_001))
    for r in res:
        mine = [float(x["reward_mean"]) for x in runs if x["policy"] == r["policy"]]
        assert np.isclose(np.mean(mine), float(r["reward_mean"]), rtol=1e-6)


def test_paired_grid_error_is_over_seeds():
    """The cells of one seed share its flows, so the grid's paired error is that of the
    per-seed means: a difference that is one offset per seed, equal in every cell, has
    the error of those offsets over the seeds, not one shrunk by the number of cells."""
    rng = np.random.default_rng(0)
    offsets = rng.normal(0.0, 1e-3, 6)
    a = rng.normal(0.3, 0.01, (48, 6))
    diff, se = paired_diff(a + offsets[None, :], a)
    assert np.isclose(diff, offsets.mean())
    assert np.isclose(se, offsets.std(ddof=1) / np.sqrt(6))
    naive = np.std(np.broadcast_to(offsets, (48, 6)), ddof=1) / np.sqrt(48 * 6)
    assert se > 5 * naive
    # independent noise per cell and seed: the per-seed means average it over the cells
    noise = rng.normal(0.0, 1e-3, (48, 6))
    _, se2 = paired_diff(a + noise, a)
    assert np.isclose(se2, noise.mean(0).std(ddof=1) / np.sqrt(6))
    assert np.isnan(paired_diff(a[:, :1], a[:, :1])[1])
    # one cell ([seeds]): the error over its seeds
    d1, se1 = paired_diff(a[0] + noise[0], a[0])
    assert np.isclose(d1, noise[0].mean()) and np.isclose(se1, noise[0].std(ddof=1) / np.sqrt(6))


def test_evaluate_refuses_mismatched_policy(tmp_path, capsys):
    pol = tmp_path / "bad"
    save_policy(pol, [(np.zeros((7, 2)), np.zeros(2))], obs_mean=np.zeros(7), obs_std=np.ones(7),
                obs_layout=LAYOUT[:7], formulation="RLBM-thesis-v0", num_classes=2)
    assert evaluate_cli.main(["--policy", str(pol), "--seeds", "1", "--out", str(tmp_path / "r")]) == 2
    assert "width 7" in capsys.readouterr().err
