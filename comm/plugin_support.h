// What every comm plugin (comm/plugin_abi.h) would otherwise write again:
// element sizes and names of ABI values, the plugin struct's header, and the
// exported entry point that hands each host the newest struct version it
// reads. Header-only C++17 shipped with the ABI header: no Abseil, no host
// code, usable by any plugin. Logging: comm/plugin_log.h; status: comm/plugin_status.h.
//
//   const tpx_comm_plugin_v2_t kPlugin = {
//       {tpx::plugin::Header<tpx_comm_plugin_v2_t>("ucx", "tpx-ucx 1.1"), &Init, ...},
//       &Reject};
//   TPX_COMM_PLUGIN_EXPORT(kPlugin)  // at global scope: defines tpx_comm_plugin_entry
//
//   size_t bytes = args->count * tpx::plugin::ElementSize(args->dtype);
//   std::string what = std::string("nccl ") + tpx::plugin::CollKindName(args->kind);
#ifndef TPX_COMM_PLUGIN_SUPPORT_H_
#define TPX_COMM_PLUGIN_SUPPORT_H_

#include <cstddef>
#include <cstdint>

#include "comm/plugin_abi.h"

namespace tpx::plugin {

// Bytes per element of `dtype`. The host validates dtypes before any call,
// so the fallback for an unknown value is never used for real data.
constexpr size_t ElementSize(tpx_dtype_t dtype) {
  switch (dtype) {
    case TPX_DTYPE_F32: return 4;
    case TPX_DTYPE_BF16: return 2;
    case TPX_DTYPE_F16: return 2;
    case TPX_DTYPE_I32: return 4;
    case TPX_DTYPE_I64: return 8;
    case TPX_DTYPE_BOOL: return 1;
  }
  return 1;
}

// The user-facing name of a collective kind, as the host's messages spell
// it: "all_reduce", "all_gather" (for ALL_GATHER_V), ..., "unknown".
constexpr const char* CollKindName(tpx_coll_kind_t kind) {
  switch (kind) {
    case TPX_COLL_ALL_REDUCE: return "all_reduce";
    case TPX_COLL_BROADCAST: return "broadcast";
    case TPX_COLL_REDUCE: return "reduce";
    case TPX_COLL_ALL_GATHER_V: return "all_gather";
    case TPX_COLL_REDUCE_SCATTER_V: return "reduce_scatter";
    case TPX_COLL_GATHER_V: return "gather";
    case TPX_COLL_SCATTER_V: return "scatter";
    case TPX_COLL_ALL_TO_ALL_V: return "all_to_all";
    case TPX_COLL_SEND: return "send";
    case TPX_COLL_RECV: return "recv";
    case TPX_COLL_BARRIER: return "barrier";
  }
  return "unknown";
}

// The ABI version each plugin struct implements.
template <typename PluginStruct>
struct AbiVersionOf;
template <>
struct AbiVersionOf<tpx_comm_plugin_v1_t> {
  static constexpr uint32_t value = 1;
};
template <>
struct AbiVersionOf<tpx_comm_plugin_v2_t> {
  static constexpr uint32_t value = 2;
};
template <>
struct AbiVersionOf<tpx_comm_plugin_v3_t> {
  static constexpr uint32_t value = 3;
};

// The header of a plugin struct of type PluginStruct: its size, the magic
// and its ABI version, so they cannot disagree with the type.
template <typename PluginStruct>
constexpr tpx_comm_plugin_header_t Header(const char* name, const char* version) {
  return {static_cast<uint32_t>(sizeof(PluginStruct)), TPX_COMM_PLUGIN_MAGIC,
          AbiVersionOf<PluginStruct>::value, name, version};
}

// A plugin struct as each host version reads it. A newer struct begins with
// every older one, so an older host gets a copy of that prefix whose header
// carries the older size and version (a host checks struct_size against the
// version it is told).
class PluginVersions {
 public:
  explicit PluginVersions(const tpx_comm_plugin_v1_t& plugin) : newest_(&plugin.header) {}
  explicit PluginVersions(const tpx_comm_plugin_v2_t& plugin)
      : newest_(&plugin.v1.header), v1_(Prefix(plugin.v1)) {}
  explicit PluginVersions(const tpx_comm_plugin_v3_t& plugin)
      : newest_(&plugin.v2.v1.header), v1_(Prefix(plugin.v2.v1)), v2_(Prefix(plugin.v2)) {}

  // The newest struct not newer than `host_abi_version`; null when none.
  const tpx_comm_plugin_header_t* For(uint32_t host_abi_version) const {
    if (host_abi_version >= newest_->abi_version) return newest_;
    if (host_abi_version >= 2 && newest_->abi_version > 2) return &v2_.v1.header;
    if (host_abi_version >= 1) return &v1_.header;
    return nullptr;
  }

 private:
  template <typename PluginStruct>
  static PluginStruct Prefix(const PluginStruct& plugin) {
    PluginStruct copy = plugin;
    tpx_comm_plugin_header_t& header = reinterpret_cast<tpx_comm_plugin_header_t&>(copy);
    header.struct_size = sizeof(PluginStruct);
    header.abi_version = AbiVersionOf<PluginStruct>::value;
    return copy;
  }

  const tpx_comm_plugin_header_t* newest_;
  tpx_comm_plugin_v1_t v1_{};
  tpx_comm_plugin_v2_t v2_{};
};

}  // namespace tpx::plugin

// Defines the plugin's one exported symbol (TPX_COMM_PLUGIN_ENTRY_SYMBOL),
// serving `plugin_struct` (a tpx_comm_plugin_vN_t with static storage) to
// hosts of every version down to 1. Use once, at global scope.
#define TPX_COMM_PLUGIN_EXPORT(plugin_struct)                                            \
  extern "C" __attribute__((visibility("default"))) const tpx_comm_plugin_header_t*   \
  tpx_comm_plugin_entry(uint32_t host_abi_version) {                                   \
    static const ::tpx::plugin::PluginVersions versions(plugin_struct);                \
    return versions.For(host_abi_version);                                             \
  }

#endif  // TPX_COMM_PLUGIN_SUPPORT_H_
