"""System-library repositories tpx builds against (all local; nothing is downloaded).

A workspace that depends on tpx calls this from its WORKSPACE:

    load("@tpx//third_party:repositories.bzl", "tpx_dependencies")
    tpx_dependencies()
"""

load("//third_party/cuda:cuda_configure.bzl", "cuda_configure")

def _maybe_local(name, path, build_file):
    if name not in native.existing_rules():
        native.new_local_repository(
            name = name,
            path = path,
            build_file = str(build_file),
        )

def tpx_dependencies():
    _maybe_local("com_google_absl", "/usr/include/absl", Label("//third_party/absl:absl.BUILD"))
    _maybe_local("com_google_googletest", "/usr/include/gtest", Label("//third_party/gtest:gtest.BUILD"))
    _maybe_local("com_google_benchmark", "/usr/include/benchmark", Label("//third_party/benchmark:benchmark.BUILD"))
    _maybe_local("openblas", "/usr/include/x86_64-linux-gnu/openblas-pthread", Label("//third_party/openblas:openblas.BUILD"))
    _maybe_local("dnnl", "/usr/include", Label("//third_party/dnnl:dnnl.BUILD"))
    _maybe_local("ucx", "/usr/include/ucp", Label("//third_party/ucx:ucx.BUILD"))
    _maybe_local("nlohmann_json", "/usr/include/nlohmann", Label("//third_party/nlohmann_json:nlohmann_json.BUILD"))
    if "local_cuda" not in native.existing_rules():
        cuda_configure(name = "local_cuda")
