"""cuda_library: compiles .cu files with the local nvcc into a cc_library.

    load("//tools/cuda:cuda.bzl", "cuda_library")
    cuda_library(
        name = "kernels",
        srcs = ["kernels.cu"],
        hdrs = ["kernels.h"],   # plain C++ headers, usable from .cc files
    )

Each .cu file becomes one position-independent object holding SASS for
sm_80 and sm_90 plus compute_90 PTX (so newer GPUs JIT-compile it). nvcc is
run by a genrule with the toolkit found by @local_cuda (no downloads). Where
no toolkit is found the library has headers only; callers put CUDA-only
targets behind if_cuda() from @local_cuda//:defs.bzl.
"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "NVCC")

# Two SASS targets plus one PTX keep CI compile time modest (one nvcc pass
# per architecture).
CUDA_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=[sm_90,compute_90]",
]

CUDA_NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-Wall",
    "--expt-relaxed-constexpr",
    "--extended-lambda",
]

def cuda_library(name, srcs, hdrs = [], deps = [], nvcc_flags = [], **kwargs):
    """A cc_library from .cu sources compiled by nvcc.

    Args:
      name: the cc_library's name.
      srcs: .cu files (and private .cuh headers they include).
      hdrs: public headers of the library, also visible to nvcc.
      deps: cc_library deps of the resulting library (link and headers for
        .cc users; nvcc only sees in-repo headers listed in srcs/hdrs).
      nvcc_flags: extra nvcc flags.
      **kwargs: passed to the cc_library (visibility, testonly, ...).
    """
    cu_srcs = [s for s in srcs if s.endswith(".cu")]
    private_hdrs = [s for s in srcs if not s.endswith(".cu")]
    objs = []
    if CUDA_FOUND:
        for src in cu_srcs:
            obj = "_cuda_objs/%s/%s.pic.o" % (name, src[:-len(".cu")])
            native.genrule(
                name = "%s_%s_nvcc" % (name, src[:-len(".cu")].replace("/", "_")),
                srcs = [src] + hdrs + private_hdrs,
                outs = [obj],
                cmd = " ".join([
                    NVCC,
                    "-c",
                    "$(location %s)" % src,
                    "-o $@",
                    "-I.",
                    "-I$(GENDIR)",
                ] + CUDA_GENCODE + CUDA_NVCC_FLAGS + nvcc_flags),
                message = "nvcc %s" % src,
                visibility = ["//visibility:private"],
                tags = kwargs.get("tags", []),
                testonly = kwargs.get("testonly", False),
            )
            objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + (["@local_cuda//:cudart"] if CUDA_FOUND else []),
        **kwargs
    )

def cuda_cc_library(**kwargs):
    """A cc_library that exists only where a CUDA toolkit was found."""
    if CUDA_FOUND:
        native.cc_library(**kwargs)

def cuda_cc_test(**kwargs):
    """A cc_test that exists only where a CUDA toolkit was found.

    Tests should still GTEST_SKIP (with the reason) when no device is visible.
    """
    if CUDA_FOUND:
        native.cc_test(**kwargs)

def cuda_cc_binary(**kwargs):
    """A cc_binary that exists only where a CUDA toolkit was found."""
    if CUDA_FOUND:
        native.cc_binary(**kwargs)
