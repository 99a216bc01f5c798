"""Multi-rank tests: real processes talking through the UCX plugin.

    load("//testing:multirank_test.bzl", "tpx_multirank_test")

    tpx_multirank_test(
        name = "layers_test",
        srcs = ["layers_test.cc"],
        deps = [":parallel_linear"],
    )

A test body runs on N forked ranks (testing/multiprocess.h, RunOnRanks) that
load `libtpx_comm_ucx.so` from the test's runfiles. This macro says once what
every such test needs: the plugin as data, the harness and gtest_main as deps,
one GEMM thread per rank (the ranks share the test's CPUs) and a CPU
reservation so that Bazel does not run two of them on the same cores.
"""

UCX_PLUGIN = "//comm_ucx:libtpx_comm_ucx.so"

def tpx_multirank_test(
        name,
        srcs,
        deps = [],
        data = [],
        size = "medium",
        cpus = 2,
        tags = [],
        env = {},
        harness = True,
        **kwargs):
    """A cc_test whose ranks load the UCX plugin.

    Args:
      name: the test's name.
      srcs: its sources.
      deps: its own deps (the harness and gtest_main are added).
      data: more runtime files (the UCX plugin is added).
      size: Bazel test size ("small": under a minute, "medium": five).
      cpus: CPUs the ranks keep busy, reserved as the tag "cpu:N" (1: no tag).
      tags: more tags (e.g. "no-sandbox" for tests that make namespaces).
      env: more environment variables (TPX_NUM_THREADS=1 unless given).
      harness: False for tests that drive the plugin's C ABI themselves
        (comm_ucx/plugin_testutil.h) instead of testing/multiprocess.h.
      **kwargs: passed to cc_test (shard_count, local_defines, ...).
    """
    test_env = {"TPX_NUM_THREADS": "1"}
    test_env.update(env)
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        data = [UCX_PLUGIN] + data,
        env = test_env,
        tags = (["cpu:%d" % cpus] if cpus > 1 else []) + tags,
        deps = deps + (["//testing:multiprocess"] if harness else []) + [
            "@com_google_googletest//:gtest_main",
        ],
        **kwargs
    )
