"""libFuzzer targets that also build and run, briefly, without libFuzzer."""

def tpx_fuzz_target(name, srcs, deps, corpus, mutations = 10000):
    """Defines a fuzz target and its test.

    `name`: the fuzzer binary. Under --config=fuzz (clang) it is a libFuzzer
    binary: `bazel-bin/<pkg>/<name> <corpus dir>`. Otherwise its main()
    replays the files given on the command line (//testing:fuzz_replay_main).
    `name + "_test"`: replays `corpus` plus `mutations` deterministic
    mutations of it (a few seconds), part of `bazel test //...`.
    """
    main = select({
        "//testing:libfuzzer": [],
        "//conditions:default": ["//testing:fuzz_replay_main"],
    })
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = srcs,
        deps = deps + main,
    )
    native.cc_test(
        name = name + "_test",
        size = "small",
        srcs = srcs,
        deps = deps + main,
        data = corpus,
        args = ["--mutations=%d" % mutations] + ["$(location %s)" % f for f in corpus],
    )
