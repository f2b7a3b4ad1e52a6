"""Bad parameters fail early with an error naming the field."""
import pytest

from rlbm_jax.env import make_params, thesis_params, traffic, validate

pytestmark = pytest.mark.quick  # the whole file is in the quick tier


@pytest.mark.parametrize("kwargs, field", [
    (dict(bottleneck_rate_bps=0), "bottleneck_rate_bps"),
    (dict(access_rate_bps=-1e6), "access_rate_bps"),
    (dict(buffer_per_class_pkts=0), "buffer_per_class_pkts"),
    (dict(buffer_pkts=0), "buffer_pkts"),
    (dict(num_flow_slots=4, num_senders=10), "num_flow_slots"),
    (dict(policy="wred"), "policy"),
    (dict(red_min_th_pkts=20, red_max_th_pkts=10), "red_min_th_pkts"),
    (dict(red_max_p=1.5), "red_max_p"),
    (dict(codel_interval_s=0), "codel_interval_s"),
    (dict(pie_target_s=-0.01), "pie_target_s"),
    (dict(tcp="vegas"), "tcp"),
    (dict(scheduler="wfq"), "scheduler"),
    (dict(delayed_ack=3), "delayed_ack"),
    (dict(mss_bytes=0), "mss_bytes"),
    (dict(load=-0.1), "load"),
    (dict(bottleneck_delay_s=-1e-3), "bottleneck_delay_s"),
    (dict(long_flows=100, num_flow_slots=64), "long_flows"),
    (dict(cdf="no-such-table"), "cdf"),
])
def test_bad_parameter_names_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        thesis_params(**kwargs)


def test_non_monotone_cdf_rejected(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("size_bytes,cdf\n100,0.0\n200,0.6\n300,0.4\n400,1.0\n")
    with pytest.raises(ValueError, match="cdf.*monotone"):
        make_params(cdf=str(f))
    with pytest.raises(ValueError, match="cdf"):
        traffic.parse_table("100,0\n50,1\n")


def test_custom_cdf_file_accepted(tmp_path):
    f = tmp_path / "two.csv"
    f.write_text("# two sizes\nsize_bytes,cdf\n1000,0\n3000,1\n")
    p = make_params(cdf=str(f))
    assert float(traffic.mean_size_bytes(p.cdf_size_bytes, p.cdf_prob)) == pytest.approx(2000.0)


def test_validate_catches_hand_edits():
    import jax.numpy as jnp
    p = thesis_params()
    validate(p)
    with pytest.raises(ValueError, match="bottleneck_rate_bps"):
        validate(p.replace(bottleneck_rate_bps=jnp.float32(-1)))
    with pytest.raises(ValueError, match="class_cap_pkts"):
        validate(p.replace(class_cap_pkts=jnp.array([5000, 5], jnp.int32)))


@pytest.mark.quick
def test_host_params_and_the_stack_are_the_device_params_leaf_for_leaf():
    """`host_params` checks and builds as `make_params` does and leaves the same values on the
    host (dtype and bits); its derived quantities are the device params' to the bit.
    `stack_params` stacks on the host what `jnp.stack` would (dtype, weak type, values),
    keeps `jnp.stack` for weak-typed leaves."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from rlbm_jax.env.params import host_params, pad_params, stack_params
    from rlbm_jax.env.rlbm_env import make_env_params

    kws = [dict(), dict(tcp="cubic", policy="red", buffer_per_class_pkts=[30, 70], load=0.7),
           dict(num_senders=4, flow_groups=2, access_delay_s=[1e-3, 9e-3], tcp=["cubic", "newreno"], long_flows=2)]
    for kw in kws:
        dev, host = make_params(**kw), host_params(**kw)
        assert jax.tree.structure(dev) == jax.tree.structure(host)
        for a, b in zip(jax.tree.leaves(dev), jax.tree.leaves(host)):
            assert isinstance(a, jax.Array) and not a.weak_type and isinstance(b, np.ndarray)
            assert a.dtype == b.dtype and a.shape == b.shape and np.asarray(a).tobytes() == b.tobytes()
        for q in ("tick_s", "bdp_pkts", "base_rtt_s", "group_base_rtt_s", "ack_delay_ticks"):
            x, y = np.asarray(getattr(dev, q)), np.asarray(getattr(host, q))
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), q
    with pytest.raises(ValueError, match="load"):
        host_params(load=-1.0)
    items = [make_env_params(make_params(**kw)) for kw in kws[:2]]  # (env params hold weak-typed leaves too)
    got, want = stack_params(items), jax.tree.map(lambda *xs: jnp.stack(xs), *pad_params(items))
    assert jax.tree.structure(got) == jax.tree.structure(want)
    assert any(x.weak_type for x in jax.tree.leaves(want))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert (a.dtype, a.weak_type, a.shape) == (b.dtype, b.weak_type, b.shape)
        assert np.array_equal(np.asarray(a), np.asarray(b))
