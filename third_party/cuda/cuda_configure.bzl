"""Finds a local CUDA toolkit (with cuBLAS and NCCL) without downloading anything.

Creates @local_cuda with:
  //:cuda_headers, //:cudart, //:cublas, //:nccl   cc_library targets
  //:defs.bzl                                      CUDA_FOUND, NVCC, if_cuda(yes, no)
Where no toolkit is found, the targets are empty and CUDA_FOUND is False, so
CUDA-only targets drop out via if_cuda() and `bazel test //...` still passes.
"""

def _cuda_configure_impl(rctx):
    cuda_path = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    root = rctx.path(cuda_path)
    nvcc = root.get_child("bin").get_child("nvcc")
    header = root.get_child("include").get_child("cuda_runtime.h")
    nccl_header = root.get_child("include").get_child("nccl.h")
    found = nvcc.exists and header.exists and nccl_header.exists

    if found:
        rctx.symlink(root.get_child("include"), "include")
        rctx.symlink(root.get_child("lib64"), "lib64")
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include"],
)

cc_library(
    name = "cudart",
    deps = [":cuda_headers"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart"],
)

cc_library(
    name = "cublas",
    deps = [":cudart"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcublasLt", "-lcublas"],
)

cc_library(
    name = "nccl",
    deps = [":cudart"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lnccl"],
)
""".format(lib = str(root.get_child("lib64")))
    else:
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "cublas")
cc_library(name = "nccl")
"""
    rctx.file("BUILD", build)
    rctx.file("defs.bzl", """
CUDA_FOUND = {found}
NVCC = "{nvcc}"

def if_cuda(if_true, if_false = []):
    return if_true if CUDA_FOUND else if_false
""".format(found = found, nvcc = str(nvcc) if found else ""))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
