// The switch's counters out: DPDK telemetry commands (/prism/...) and the
// summary printed on exit. Both iterate the counter tables (kRxCounters,
// kTxCounters, kReduceCounters, kEmitCounters, sw::kReducerStats,
// sw::kJobStats, sw::kDrops, the parser's refusals), so a counter added to a
// table shows up in both without another line here.
#pragma once

namespace prism::pipe {

class Runtime;

// Registers the /prism/ commands once; they read `rt` (null: they answer -1).
void register_telemetry(const Runtime* rt);
// The exit summary on stdout; with `report_incomplete`, the ops left open.
void print_summary(const Runtime& rt, bool report_incomplete);

}  // namespace prism::pipe
