-- Wireshark dissector for the PRISM wire protocol, version 1.
--
-- Written from docs/PROTOCOL.md (header, NACK reasons, sessions: JOIN and
-- JOINED, job pools: ALLOC, ALLOCATED, LEAVE and LEFT, queries: QUERY and
-- STATUS, Kulisch partials) and
-- docs/ARITHMETIC.md (element formats). Load it with
--   wireshark -X lua_script:tools/wireshark/prism.lua
--   tshark    -X lua_script:tools/wireshark/prism.lua -r capture.pcap
-- or copy it into ~/.local/lib/wireshark/plugins/. See README.md next to it.
--
-- Wireshark already owns the protocol filter name "prism" (the 802.11 "Prism
-- capture header"), and a Lua Proto cannot share it, so this protocol is
-- registered as "prism_wire" (filter `prism_wire`, preferences
-- `prism_wire.*`). Its fields keep the documented prism.* names: prism.job,
-- prism.kind, prism.lane.n ... (none collides with the 802.11 header's
-- prism.msgcode/prism.did.* fields).
--
-- Registered on UDP ports 20562 .. 20562 + 63 (preference "prism_wire.udp_port",
-- the switch's udp_port, 0 disables it; a switch takes one port per reducer
-- shard above it: docs/PROTOCOL.md, Steering. Preference "prism_wire.shards",
-- the switch's reducers.shards, narrows the range to its shards and checks
-- each packet's port against the steering rule), available under Decode As,
-- and optionally as a heuristic on any UDP port (preference "prism_wire.heuristic").

local prism = Proto("prism_wire", "PRISM in-network reduction protocol")

local DEFAULT_PORT = 20562
local MAX_SHARDS = 64  -- reducers.shards is 1..64: a switch's ports are udp_port .. udp_port + 63 at most
local HEADER_LEN = 32
local FRAGMENT_HEADER_LEN = 4
local LANE_HEADER_LEN = 3
local LANE_MAX_BYTES = 47  -- n + offset <= 47

-- Bit operations: bit32 (Lua 5.2, Wireshark <= 4.2), else Wireshark's "bit",
-- else Lua 5.3+ operators (compiled with load() so Lua 5.2 still parses this file).
local band, rshift
if bit32 then
  band, rshift = bit32.band, bit32.rshift
elseif bit then
  band, rshift = bit.band, bit.rshift
else
  band = load("return function(a, b) return math.tointeger(a) & math.tointeger(b) end")()
  rshift = load("return function(a, n) return math.tointeger(a) >> n end")()
end
local NEG_ZERO = -1 / math.huge

---------------------------------------------------------------------------
-- Codes

local KIND = { [1] = "CONTRIB", [2] = "PARTIAL", [3] = "RESULT", [4] = "NACK", [5] = "JOIN", [6] = "JOINED",
  [7] = "ALLOC", [8] = "ALLOCATED", [9] = "LEAVE", [10] = "LEFT", [11] = "QUERY", [12] = "STATUS" }
local KIND_CONTRIB, KIND_PARTIAL, KIND_RESULT, KIND_NACK, KIND_JOIN, KIND_JOINED = 1, 2, 3, 4, 5, 6
local KIND_ALLOC, KIND_ALLOCATED, KIND_LEAVE, KIND_LEFT = 7, 8, 9, 10  -- job pools
local KIND_QUERY, KIND_STATUS = 11, 12  -- queries
local KIND_MAX = 12
-- STATUS's status byte (PROTOCOL.md, Queries).
local QUERY_STATUS = { [0] = "MISSING", [1] = "HELD" }
local QUERY_STATUS_TEXT = {
  [0] = "the switch does not hold the rank's contribution: re-send it",
  [1] = "the switch holds the rank's contribution and waits for others",
}
local ALLOCATED_BODY_LEN = 8  -- slot_quota, idle_timeout_ms: big-endian u32 each

local FORMAT_NAME = {
  [1] = "fp32", [2] = "fp16", [3] = "bf16", [4] = "e4m3fn", [5] = "e4m3fnuz",
  [6] = "e5m2", [7] = "e5m2fnuz", [8] = "int8", [9] = "int32",
}
-- bytes, exponent/mantissa bits, bias, how specials are encoded, and the
-- Kulisch lane unit exponent (the format's smallest subnormal: 2^(Emin-p+1)).
local FORMAT = {
  [1] = { bytes = 4, e = 8, m = 23, bias = 127, style = "ieee", unit = -149 },
  [2] = { bytes = 2, e = 5, m = 10, bias = 15, style = "ieee", unit = -24 },
  [3] = { bytes = 2, e = 8, m = 7, bias = 127, style = "ieee", unit = -133 },
  [4] = { bytes = 1, e = 4, m = 3, bias = 7, style = "fn", unit = -9 },
  [5] = { bytes = 1, e = 4, m = 3, bias = 8, style = "fnuz", unit = -10 },
  [6] = { bytes = 1, e = 5, m = 2, bias = 15, style = "ieee", unit = -16 },
  [7] = { bytes = 1, e = 5, m = 2, bias = 16, style = "fnuz", unit = -17 },
  [8] = { bytes = 1, int = true, unit = 0 },
  [9] = { bytes = 4, int = true, unit = 0 },
}

local POLICY = { [1] = "FP32_ARRIVAL", [2] = "KULISCH_FIXED", [3] = "FP32_BINOMIAL" }
local ENCODING = { [1] = "elements in dtype", [2] = "elements in out_dtype", [3] = "Kulisch partial" }
local ENC_DTYPE, ENC_OUT_DTYPE, ENC_KULISCH = 1, 2, 3
local TRANSPORT = { [1] = "ROUNDED", [2] = "KULISCH", [3] = "AUTO" }
local EXCEPTIONS = { [1] = "IEEE", [2] = "SATURATE" }
local NACK_REASON = {
  [1] = "MALFORMED",
  [2] = "UNKNOWN_JOB",
  [3] = "NOT_A_MEMBER",
  [4] = "DESCRIPTOR_MISMATCH",
  [5] = "ACCUMULATOR_TOO_NARROW",
  [6] = "NO_FREE_SLOT",
  [7] = "RESULT_EXPIRED",
  [8] = "OP_ABANDONED",
  [9] = "POOL_FULL",
  [10] = "GROUP_TOO_LARGE",
  [11] = "OUT_OF_POOL",
  [12] = "RANK_TAKEN",
  [13] = "CHUNK_TOO_LARGE",
  [14] = "SWITCH_STOPPING",
}
local NACK_OP_ABANDONED = 8
local NACK_REASON_TEXT = {
  [1] = "malformed packet",
  [2] = "unknown job",
  [3] = "not a member",
  [4] = "descriptor mismatch",
  [5] = "accumulator too narrow",
  [6] = "no free slot: retry later",
  [7] = "result expired",
  [8] = "op abandoned: a contributor never sent (or died); fail the collective",
  [9] = "pool full: every job id of the pool is taken; retry later",
  [10] = "group too large: above the pool's max_group",
  [11] = "out of pool: the source or its switch port is outside the pool",
  [12] = "rank taken: that rank is bound to another address",
  [13] = "chunk too large: its RESULT fits no frame, or its accumulator the switch's per-slot memory; send smaller chunks",
  [14] = "the switch is stopping: it takes no new op; run the job again once it is back",
}

local FLAG_RETRANSMIT, FLAG_LAST_CHUNK, FLAG_SIDEBAND = 0x01, 0x02, 0x04
local JOINED_COMPLETE = 0x01  -- JOINED's status bit0: every rank of the job has joined
local STATUS_OVERFLOW, STATUS_INVALID, STATUS_NAN_INPUT = 0x01, 0x02, 0x04
local SIDE_NAN_INPUT, SIDE_POS_INF, SIDE_NEG_INF, SIDE_NEG_ZERO_ONLY = 0x01, 0x02, 0x04, 0x08
local SIDE_INVALID, SIDE_OVERFLOW, SIDE_RESERVED, SIDE_SIGN = 0x10, 0x20, 0x40, 0x80

---------------------------------------------------------------------------
-- Fields

local f = {}
f.magic = ProtoField.uint16("prism.magic", "Magic", base.HEX)
f.version = ProtoField.uint8("prism.version", "Version", base.DEC)
f.kind = ProtoField.uint8("prism.kind", "Kind", base.DEC, KIND)
f.job = ProtoField.uint32("prism.job", "Job", base.DEC)
f.op = ProtoField.uint32("prism.op", "Op", base.DEC)
f.chunk = ProtoField.uint32("prism.chunk", "Chunk", base.DEC)
f.sender = ProtoField.uint16("prism.sender", "Sender", base.DEC)
f.group = ProtoField.uint16("prism.group", "Group", base.DEC)
f.terms = ProtoField.uint16("prism.terms", "Terms", base.DEC)
f.count = ProtoField.uint16("prism.count", "Count", base.DEC)
f.dtype = ProtoField.uint8("prism.dtype", "Input format (dtype)", base.DEC, FORMAT_NAME)
f.out_dtype = ProtoField.uint8("prism.out_dtype", "Result format (out_dtype)", base.DEC, FORMAT_NAME)
f.policy = ProtoField.uint8("prism.policy", "Policy", base.DEC, POLICY)
f.encoding = ProtoField.uint8("prism.encoding", "Encoding", base.DEC, ENCODING)
f.transport = ProtoField.uint8("prism.transport", "Transport", base.DEC, TRANSPORT)
f.exceptions = ProtoField.uint8("prism.exceptions", "Exceptions", base.DEC, EXCEPTIONS)
f.flags = ProtoField.uint8("prism.flags", "Flags", base.HEX)
f.flags_retransmit = ProtoField.bool("prism.flags.retransmit", "RETRANSMIT", 8, nil, FLAG_RETRANSMIT)
f.flags_last_chunk = ProtoField.bool("prism.flags.last_chunk", "LAST_CHUNK", 8, nil, FLAG_LAST_CHUNK)
f.flags_sideband = ProtoField.bool("prism.flags.sideband", "SIDEBAND", 8, nil, FLAG_SIDEBAND)
f.flags_reserved = ProtoField.uint8("prism.flags.reserved", "Reserved (must be 0)", base.HEX, nil, 0xF8)
f.status = ProtoField.uint8("prism.status", "Status", base.HEX)
f.status_overflow = ProtoField.bool("prism.status.overflow", "OVERFLOW", 8, nil, STATUS_OVERFLOW)
f.status_invalid = ProtoField.bool("prism.status.invalid", "INVALID", 8, nil, STATUS_INVALID)
f.status_nan_input = ProtoField.bool("prism.status.nan_input", "NAN_INPUT", 8, nil, STATUS_NAN_INPUT)
f.status_reserved = ProtoField.uint8("prism.status.reserved", "Reserved (must be 0)", base.HEX, nil, 0xF8)
f.nack_reason = ProtoField.uint8("prism.nack_reason", "NACK reason", base.DEC, NACK_REASON)
f.query_status = ProtoField.uint8("prism.query_status", "Query status", base.DEC, QUERY_STATUS)
-- Sessions (JOIN, JOINED): the header fields under the names PROTOCOL.md gives them there.
f.nonce = ProtoField.uint32("prism.nonce", "Nonce (the rank's, new each time its process starts)", base.HEX_DEC)
f.first_op = ProtoField.uint32("prism.first_op", "Session's first op number", base.DEC)
f.fresh_op = ProtoField.uint32("prism.fresh_op", "First op number fresh at the forwarding leaf", base.DEC)
f.rank = ProtoField.uint16("prism.rank", "Rank", base.DEC)
f.ranks_joined = ProtoField.uint16("prism.ranks_joined", "Ranks joined", base.DEC)
-- Job pools (ALLOC, ALLOCATED, LEAVE, LEFT).
f.pool = ProtoField.uint32("prism.pool", "Pool id (the pool's first job id)", base.DEC)
f.shards = ProtoField.uint16("prism.shards", "The switch's shard count", base.DEC)
f.still_bound = ProtoField.uint16("prism.still_bound", "Ranks still bound", base.DEC)
f.slot_quota = ProtoField.uint32("prism.slot_quota", "Slot quota", base.DEC)
f.idle_timeout = ProtoField.uint32("prism.idle_timeout_ms", "Idle timeout (ms)", base.DEC)
f.status_complete = ProtoField.bool("prism.status.complete", "COMPLETE", 8, nil, JOINED_COMPLETE)
f.status_joined_reserved = ProtoField.uint8("prism.status.joined_reserved", "Reserved (must be 0)", base.HEX, nil,
  0xFE)
-- JOINED's body: a bitmap of ceil(group/8) bytes, bit r%8 of byte r/8 set for each rank r joined.
f.joined = ProtoField.bytes("prism.joined", "Ranks joined (bitmap)")
f.joined_rank = ProtoField.uint16("prism.joined.rank", "Joined rank", base.DEC)
f.not_joined_rank = ProtoField.uint16("prism.joined.missing", "Rank not joined yet", base.DEC)
-- OP_ABANDONED's and STATUS's body: a bitmap of ceil(group/8) bytes, bit r%8 of byte r/8 set for each member rank r missing.
f.missing = ProtoField.bytes("prism.missing", "Members that had not contributed (bitmap)")
f.missing_rank = ProtoField.uint16("prism.missing.rank", "Missing rank", base.DEC)
f.missing_children = ProtoField.uint16("prism.missing.children",
  "Contributions missing from child switches (group - terms - missing ranks)", base.DEC)
-- Steering (PROTOCOL.md): a packet to a switch goes to udp_port + shard, shard = (job + op + chunk) mod S
-- (a JOIN's: job mod S). Generated from the UDP destination port and, when the shards preference gives S,
-- from the rule.
f.shard_port = ProtoField.uint8("prism.shard_port", "Sent to the port of shard (UDP port - udp_port)", base.DEC)
f.shard = ProtoField.uint8("prism.shard", "Shard by the steering rule", base.DEC)

f.body = ProtoField.bytes("prism.body", "Body")
f.elements = ProtoField.bytes("prism.elements", "Elements")
f.elements_count = ProtoField.uint16("prism.elements.count", "Element count", base.DEC)
f.elements_format = ProtoField.uint8("prism.elements.format", "Element format", base.DEC, FORMAT_NAME)
f.elements_length = ProtoField.uint32("prism.elements.length", "Element bytes", base.DEC)
f.el_fp32 = ProtoField.float("prism.element.fp32", "Element (fp32)")
f.el_value = ProtoField.double("prism.element.value", "Element value")
f.el_int8 = ProtoField.int8("prism.element.int8", "Element (int8)", base.DEC)
f.el_int32 = ProtoField.int32("prism.element.int32", "Element (int32)", base.DEC)

f.sideband = ProtoField.bytes("prism.sideband", "Sideband")
f.sb_status = ProtoField.uint8("prism.sideband.status", "Element status", base.HEX)
f.sb_overflow = ProtoField.bool("prism.sideband.overflow", "OVERFLOW", 8, nil, STATUS_OVERFLOW)
f.sb_invalid = ProtoField.bool("prism.sideband.invalid", "INVALID", 8, nil, STATUS_INVALID)
f.sb_nan_input = ProtoField.bool("prism.sideband.nan_input", "NAN_INPUT", 8, nil, STATUS_NAN_INPUT)
f.sb_reserved = ProtoField.uint8("prism.sideband.reserved", "Reserved (must be 0)", base.HEX, nil, 0xF8)

f.fragment = ProtoField.bytes("prism.fragment", "Fragment header")
f.first_lane = ProtoField.uint16("prism.first_lane", "First lane", base.DEC)
f.chunk_lanes = ProtoField.uint16("prism.chunk_lanes", "Chunk lanes", base.DEC)
f.lanes = ProtoField.bytes("prism.lanes", "Lane records")
f.lane = ProtoField.bytes("prism.lane", "Lane record")
f.lane_index = ProtoField.uint16("prism.lane.index", "Lane", base.DEC)
f.lane_side = ProtoField.uint8("prism.lane.side", "Sideband", base.HEX, nil, 0x7F)
f.lane_side_nan = ProtoField.bool("prism.lane.side.nan_input", "NAN_INPUT", 8, nil, SIDE_NAN_INPUT)
f.lane_side_pinf = ProtoField.bool("prism.lane.side.pos_inf", "POS_INF", 8, nil, SIDE_POS_INF)
f.lane_side_ninf = ProtoField.bool("prism.lane.side.neg_inf", "NEG_INF", 8, nil, SIDE_NEG_INF)
f.lane_side_nzero = ProtoField.bool("prism.lane.side.neg_zero_only", "NEG_ZERO_ONLY", 8, nil, SIDE_NEG_ZERO_ONLY)
f.lane_side_invalid = ProtoField.bool("prism.lane.side.invalid", "INVALID", 8, nil, SIDE_INVALID)
f.lane_side_overflow = ProtoField.bool("prism.lane.side.overflow", "OVERFLOW", 8, nil, SIDE_OVERFLOW)
f.lane_side_reserved = ProtoField.bool("prism.lane.side.reserved", "Reserved (must be 0)", 8, nil, SIDE_RESERVED)
f.lane_sign = ProtoField.bool("prism.lane.sign", "Sign", 8, { "negative", "positive" }, SIDE_SIGN)
f.lane_n = ProtoField.uint8("prism.lane.n", "Magnitude bytes (n)", base.DEC)
f.lane_offset = ProtoField.uint8("prism.lane.offset", "Offset (bytes)", base.DEC)
f.lane_magnitude = ProtoField.bytes("prism.lane.magnitude", "Magnitude (little-endian)")
f.lane_value = ProtoField.double("prism.lane.value", "Value (approximate)")

local field_list = {}
for _, v in pairs(f) do field_list[#field_list + 1] = v end
prism.fields = field_list

---------------------------------------------------------------------------
-- Expert info

local ef = {}
ef.short_header = ProtoExpert.new("prism.short_header", "UDP payload shorter than the 32-byte PRISM header",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_magic = ProtoExpert.new("prism.bad_magic", "Bad magic (expected 0x5052 \"PR\")",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_version = ProtoExpert.new("prism.bad_version", "Unsupported version (expected 1)",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_code = ProtoExpert.new("prism.bad_code", "Unknown code",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_encoding = ProtoExpert.new("prism.bad_encoding", "Encoding not allowed for this kind",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_flags = ProtoExpert.new("prism.bad_flags", "Invalid flags",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_status = ProtoExpert.new("prism.bad_status", "Invalid status",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_group = ProtoExpert.new("prism.bad_group", "Group must be 1..65535",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_terms = ProtoExpert.new("prism.bad_terms", "Terms wrong for this kind",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_count = ProtoExpert.new("prism.bad_count", "Count wrong for this kind",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_length = ProtoExpert.new("prism.bad_length", "Body length disagrees with count and encoding",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_fragment = ProtoExpert.new("prism.bad_fragment", "Fragment header out of range",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.bad_lane = ProtoExpert.new("prism.bad_lane", "Malformed Kulisch lane record",
  expert.group.MALFORMED, expert.severity.ERROR)
ef.retransmit = ProtoExpert.new("prism.retransmit", "Retransmission",
  expert.group.SEQUENCE, expert.severity.NOTE)
ef.nack = ProtoExpert.new("prism.nack", "Packet refused (NACK)",
  expert.group.RESPONSE_CODE, expert.severity.WARN)
ef.result_status = ProtoExpert.new("prism.result_status", "Result has exception flags",
  expert.group.PROTOCOL, expert.severity.NOTE)
ef.bad_descriptor = ProtoExpert.new("prism.bad_descriptor",
  "JOIN, JOINED and the pool kinds have no descriptor: dtype ... exceptions must be 0",
  expert.group.MALFORMED, expert.severity.ERROR)
-- Shapes the parser takes but the session's rules do not (the root refuses a JOIN with nonce 0 or a
-- rank outside the group with NACK MALFORMED; a JOINED's fields must agree with each other).
ef.bad_session = ProtoExpert.new("prism.bad_session", "Session fields disagree with PROTOCOL.md's rules",
  expert.group.PROTOCOL, expert.severity.WARN)
ef.wrong_shard_port = ProtoExpert.new("prism.wrong_shard_port",
  "Sent to another shard's UDP port: the switch takes it, but passes it between its lcores in software",
  expert.group.PROTOCOL, expert.severity.WARN)
ef.session_complete = ProtoExpert.new("prism.session_complete",
  "Session complete: every rank joined; ops are numbered from the first op",
  expert.group.SEQUENCE, expert.severity.NOTE)

prism.experts = {
  ef.short_header, ef.bad_magic, ef.bad_version, ef.bad_code, ef.bad_encoding, ef.bad_flags, ef.bad_status,
  ef.bad_group, ef.bad_terms, ef.bad_count, ef.bad_length, ef.bad_fragment, ef.bad_lane, ef.retransmit,
  ef.nack, ef.result_status, ef.bad_descriptor, ef.bad_session, ef.session_complete, ef.wrong_shard_port,
}

---------------------------------------------------------------------------
-- Preferences

prism.prefs.udp_port = Pref.uint("UDP port", DEFAULT_PORT,
  "UDP port PRISM runs on (the switch's switch.udp_port), the first of its shard ports; 0 disables it")
prism.prefs.shards = Pref.uint("Shards", 0,
  "The switch's reducers.shards (1-64): its ports are udp_port .. udp_port + shards - 1, and each packet's " ..
  "port is checked against the steering rule; 0 (default): any of udp_port .. udp_port + 63, unchecked")
prism.prefs.elements = Pref.bool("Decode each element", true,
  "Add one tree item per element, lane record and sideband byte (turn off for speed)")
prism.prefs.heuristic = Pref.bool("Try heuristic on any UDP port", false,
  "Also dissect UDP payloads on other ports that start with magic 0x5052, version 1 and a known kind (1-10)")

local udp_table = DissectorTable.get("udp.port")
local registered_port, registered_count = 0, 0

-- How many ports from udp_port are PRISM's: the shards preference, or all 64 a switch may have.
local function port_count()
  local s = prism.prefs.shards
  if s >= 1 and s <= MAX_SHARDS then return s end
  return MAX_SHARDS
end

local function register_ports(port, n)
  if port == registered_port and n == registered_count then return end
  for p = registered_port, registered_port + registered_count - 1 do
    if p ~= 0 then udp_table:remove(p, prism) end
  end
  registered_port, registered_count = port, 0
  if port == 0 then return end
  n = math.min(n, 65536 - port)
  for p = port, port + n - 1 do udp_table:add(p, prism) end
  registered_count = n
end

function prism.prefs_changed()
  register_ports(prism.prefs.udp_port, port_count())
end

---------------------------------------------------------------------------
-- Helpers

local function code_name(tbl, v)
  return tbl[v] or string.format("unknown (%d)", v)
end

local function bit_names(v, names)
  local out = {}
  for _, e in ipairs(names) do
    if band(v, e[1]) ~= 0 then out[#out + 1] = e[2] end
  end
  return table.concat(out, ",")
end

local FLAG_NAMES = { { FLAG_RETRANSMIT, "RETRANSMIT" }, { FLAG_LAST_CHUNK, "LAST_CHUNK" }, { FLAG_SIDEBAND, "SIDEBAND" } }
local STATUS_NAMES = { { STATUS_OVERFLOW, "OVERFLOW" }, { STATUS_INVALID, "INVALID" }, { STATUS_NAN_INPUT, "NAN_INPUT" } }
local SIDE_NAMES = {
  { SIDE_NAN_INPUT, "NAN_INPUT" }, { SIDE_POS_INF, "POS_INF" }, { SIDE_NEG_INF, "NEG_INF" },
  { SIDE_NEG_ZERO_ONLY, "NEG_ZERO_ONLY" }, { SIDE_INVALID, "INVALID" }, { SIDE_OVERFLOW, "OVERFLOW" },
  { SIDE_RESERVED, "reserved" },
}

local function fmt_number(v)
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  if v == 0 and 1 / v < 0 then return "-0" end
  return string.format("%.9g", v)
end

-- Decodes the bits of a float format (not fp32, which Wireshark reads itself).
local function decode_float(fi, bits)
  local nbits = fi.bytes * 8
  local sign_bit = 2 ^ (nbits - 1)
  local neg = band(bits, sign_bit) ~= 0
  local e = band(rshift(bits, fi.m), 2 ^ fi.e - 1)
  local m = band(bits, 2 ^ fi.m - 1)
  local emax = 2 ^ fi.e - 1
  if fi.style == "fnuz" and bits == sign_bit then return 0 / 0 end
  if fi.style == "ieee" and e == emax then
    if m ~= 0 then return 0 / 0 end
    return neg and -math.huge or math.huge
  end
  if fi.style == "fn" and e == emax and m == 2 ^ fi.m - 1 then return 0 / 0 end
  local v
  if e == 0 then
    v = m * 2 ^ (1 - fi.bias - fi.m)
  else
    v = (2 ^ fi.m + m) * 2 ^ (e - fi.bias - fi.m)
  end
  if neg then v = -v end
  return v
end

---------------------------------------------------------------------------
-- Body: elements (encodings 1 and 2) and their sideband

local function dissect_elements(tvb, pinfo, tree, body_off, count, fmt_code, sideband)
  local fi = FORMAT[fmt_code]
  local body_len = tvb:len() - body_off
  if not fi then
    if body_len > 0 then tree:add(f.body, tvb(body_off, body_len)) end
    return
  end
  local el_len = count * fi.bytes
  local expected = el_len + (sideband and count or 0)
  local t = tree
  if body_len ~= expected then
    tree:add_proto_expert_info(ef.bad_length, string.format(
      "Body length %d disagrees with count %d and encoding: expected %d (%d x %s%s)", body_len, count, expected,
      count, FORMAT_NAME[fmt_code], sideband and " + sideband" or ""))
  end
  local avail = math.min(el_len, body_len)
  local n_el = math.floor(avail / fi.bytes)
  local et
  if avail > 0 then
    et = tree:add(f.elements, tvb(body_off, avail))
    et:add(f.elements_count, count):set_generated()
  else
    -- No element bytes at all: a generated item stands in for the (empty) elements.
    et = tree:add(f.elements_count, count)
    et:set_generated()
  end
  et:set_text(string.format("Elements: %d x %s (%d bytes)", count, FORMAT_NAME[fmt_code], el_len))
  et:add(f.elements_format, fmt_code):set_generated()
  et:add(f.elements_length, el_len):set_generated()

  local sb_off = body_off + el_len
  local sb_avail = sideband and math.max(0, math.min(count, tvb:len() - sb_off)) or 0

  if prism.prefs.elements then
    for i = 0, n_el - 1 do
      local r = tvb(body_off + i * fi.bytes, fi.bytes)
      local bits = r:le_uint()
      local item, text
      if fmt_code == 1 then
        item = et:add_le(f.el_fp32, r)
        text = fmt_number(r:le_float())
      elseif fmt_code == 8 then
        item = et:add_le(f.el_int8, r)
        text = tostring(r:le_int())
      elseif fmt_code == 9 then
        item = et:add_le(f.el_int32, r)
        text = tostring(r:le_int())
      else
        local v = decode_float(fi, bits)
        item = et:add(f.el_value, r, v)
        text = fmt_number(v)
      end
      local label = string.format("[%d] %s (0x%0" .. (fi.bytes * 2) .. "x)", i, text, bits)
      if i < sb_avail then
        local s = tvb(sb_off + i, 1):uint()
        if s ~= 0 then label = label .. " [" .. bit_names(s, STATUS_NAMES) .. "]" end
      end
      item:set_text(label)
    end
  end

  if sideband and sb_avail > 0 then
    local st = tree:add(f.sideband, tvb(sb_off, sb_avail))
    local flagged = 0
    for i = 0, sb_avail - 1 do
      if tvb(sb_off + i, 1):uint() ~= 0 then flagged = flagged + 1 end
    end
    st:append_text(string.format(" (%d status bytes, %d flagged)", sb_avail, flagged))
    if prism.prefs.elements then
      for i = 0, sb_avail - 1 do
        local r = tvb(sb_off + i, 1)
        local s = r:uint()
        local it = st:add(f.sb_status, r)
        if s ~= 0 then
          it:set_text(string.format("[%d] 0x%02x %s", i, s, bit_names(s, STATUS_NAMES)))
          it:add(f.sb_overflow, r)
          it:add(f.sb_invalid, r)
          it:add(f.sb_nan_input, r)
          if band(s, 0xF8) ~= 0 then
            it:add(f.sb_reserved, r)
            it:add_proto_expert_info(ef.bad_status, "Reserved sideband status bits set")
          end
        else
          it:set_text(string.format("[%d] 0x00", i))
        end
      end
    end
  end

  local used = el_len + (sideband and count or 0)
  if body_len > used then
    tree:add(f.body, tvb(body_off + used, body_len - used)):set_text(
      string.format("Trailing bytes: %d", body_len - used))
  end
end

---------------------------------------------------------------------------
-- Body: Kulisch partial (encoding 3)

local function lane_magnitude(tvb, off, n)
  local v = 0
  for i = n - 1, 0, -1 do v = v * 256 + tvb(off + i, 1):uint() end
  return v
end

local function dissect_kulisch(tvb, pinfo, tree, body_off, count, dtype)
  local len = tvb:len()
  local body_len = len - body_off
  if body_len < FRAGMENT_HEADER_LEN then
    tree:add_proto_expert_info(ef.bad_length, string.format(
      "Kulisch partial body of %d bytes has no room for the 4-byte fragment header", body_len))
    if body_len > 0 then tree:add(f.body, tvb(body_off, body_len)) end
    return
  end
  local ft = tree:add(f.fragment, tvb(body_off, FRAGMENT_HEADER_LEN))
  local first = tvb(body_off, 2):uint()
  local lanes = tvb(body_off + 2, 2):uint()
  ft:set_text(string.format("Fragment: lanes %d..%d of %d", first, first + count - 1, lanes))
  ft:add(f.first_lane, tvb(body_off, 2))
  local cl = ft:add(f.chunk_lanes, tvb(body_off + 2, 2))
  if lanes == 0 or first + count > lanes then
    cl:add_proto_expert_info(ef.bad_fragment, string.format(
      "Fragment out of range: first lane %d + count %d > chunk lanes %d", first, count, lanes))
  end

  local fi = FORMAT[dtype]
  local unit = fi and fi.unit or nil
  local rec_off = body_off + FRAGMENT_HEADER_LEN
  local lt
  if len > rec_off then
    lt = tree:add(f.lanes, tvb(rec_off, len - rec_off))
  else
    lt = tree:add(f.elements_count, count)
    lt:set_generated()
  end
  local at = rec_off
  local done = 0
  local detail = prism.prefs.elements
  for i = 0, count - 1 do
    if at + LANE_HEADER_LEN > len then break end
    local s = tvb(at, 1):uint()
    local n = tvb(at + 1, 1):uint()
    local offset = tvb(at + 2, 1):uint()
    local rec_len = LANE_HEADER_LEN + n
    local truncated = at + rec_len > len
    local rlen = truncated and (len - at) or rec_len
    local r = tvb(at, rlen)
    local problems = {}
    if band(s, SIDE_RESERVED) ~= 0 then problems[#problems + 1] = "reserved sideband bit 6 set" end
    if n + offset > LANE_MAX_BYTES then
      problems[#problems + 1] = string.format("n + offset = %d > %d", n + offset, LANE_MAX_BYTES)
    end
    local mag
    if n == 0 then
      if offset ~= 0 then problems[#problems + 1] = "zero lane with non-zero offset" end
      if band(s, SIDE_SIGN) ~= 0 then problems[#problems + 1] = "zero lane with the sign bit" end
    elseif not truncated then
      if band(s, SIDE_NAN_INPUT + SIDE_POS_INF + SIDE_NEG_INF + SIDE_NEG_ZERO_ONLY) ~= 0 then
        problems[#problems + 1] = "special lane carries a magnitude"
      end
      if tvb(at + LANE_HEADER_LEN, 1):uint() == 0 or tvb(at + LANE_HEADER_LEN + n - 1, 1):uint() == 0 then
        problems[#problems + 1] = "magnitude not canonical (first or last byte zero)"
      end
      mag = lane_magnitude(tvb, at + LANE_HEADER_LEN, n)
    end

    local value
    if band(s, SIDE_NAN_INPUT) ~= 0 or band(s, SIDE_POS_INF + SIDE_NEG_INF) == SIDE_POS_INF + SIDE_NEG_INF then
      value = 0 / 0
    elseif band(s, SIDE_POS_INF) ~= 0 then
      value = math.huge
    elseif band(s, SIDE_NEG_INF) ~= 0 then
      value = -math.huge
    elseif n == 0 then
      value = band(s, SIDE_NEG_ZERO_ONLY) ~= 0 and NEG_ZERO or 0
    elseif mag and unit then
      value = mag * 2 ^ (8 * offset + unit)
      if band(s, SIDE_SIGN) ~= 0 then value = -value end
    end

    if detail then
      local it = lt:add(f.lane, r)
      local sides = bit_names(band(s, 0x7F), SIDE_NAMES)
      local text = string.format("Lane %d: %s", first + i, value and fmt_number(value) or "?")
      if n > 0 then text = text .. string.format(" (n=%d, offset=%d)", n, offset) end
      if sides ~= "" then text = text .. " [" .. sides .. "]" end
      it:set_text(text)
      it:add(f.lane_index, first + i):set_generated()
      local sr = tvb(at, 1)
      local st = it:add(f.lane_side, sr)
      if band(s, 0x7F) ~= 0 then st:append_text(" (" .. sides .. ")") end
      st:add(f.lane_side_nan, sr)
      st:add(f.lane_side_pinf, sr)
      st:add(f.lane_side_ninf, sr)
      st:add(f.lane_side_nzero, sr)
      st:add(f.lane_side_invalid, sr)
      st:add(f.lane_side_overflow, sr)
      st:add(f.lane_side_reserved, sr)
      it:add(f.lane_sign, sr)
      it:add(f.lane_n, tvb(at + 1, 1))
      it:add(f.lane_offset, tvb(at + 2, 1))
      if n > 0 and rlen > LANE_HEADER_LEN then
        it:add(f.lane_magnitude, tvb(at + LANE_HEADER_LEN, rlen - LANE_HEADER_LEN))
      end
      if value then
        it:add(f.lane_value, value):set_generated()
      end
      if #problems > 0 then
        it:add_proto_expert_info(ef.bad_lane, string.format("Lane %d: %s", first + i, table.concat(problems, "; ")))
      end
    elseif #problems > 0 then
      lt:add_proto_expert_info(ef.bad_lane, string.format("Lane %d: %s", first + i, table.concat(problems, "; ")))
    end
    if truncated then
      at = len
      break
    end
    at = at + rec_len
    done = done + 1
  end
  lt:set_text(string.format("Lane records: %d of %d (%d bytes)", done, count, at - rec_off))
  if done < count then
    tree:add_proto_expert_info(ef.bad_length, string.format(
      "Body ends inside the lane records: %d of %d complete", done, count))
  elseif at < len then
    tree:add_proto_expert_info(ef.bad_length, string.format(
      "Body length disagrees with count: %d bytes after %d lane records", len - at, count))
    tree:add(f.body, tvb(at, len - at)):set_text(string.format("Trailing bytes: %d", len - at))
  end
end

-- OP_ABANDONED's bitmap: one item per member rank that had not contributed,
-- and how many contributions child switches still owed. Returns the ranks as
-- text for the Info column.
local BIT = { 1, 2, 4, 8, 16, 32, 64, 128 }
local function dissect_missing(tvb, root, group, terms, len)
  local t = root:add(f.missing, tvb(HEADER_LEN, len))
  local names, n = {}, 0
  for r = 0, group - 1 do
    local byte = tvb(HEADER_LEN + math.floor(r / 8), 1)
    if band(byte:uint(), BIT[r % 8 + 1]) ~= 0 then
      t:add(f.missing_rank, byte, r)
      n = n + 1
      if n <= 16 then names[#names + 1] = tostring(r) end
    end
  end
  if n > 16 then names[#names + 1] = string.format("... (%d in all)", n) end
  t:append_text(n == 0 and " (none of this switch's members)" or (" (ranks " .. table.concat(names, ", ") .. ")"))
  if terms + n <= group then t:add(f.missing_children, group - terms - n):set_generated() end
  return table.concat(names, ",")
end

-- JOINED's bitmap: one item per rank joined (and, generated, per rank not
-- yet joined). Returns the joined ranks as text for the Info column and how
-- many bits are set (bits of ranks >= group are counted apart).
local function dissect_joined(tvb, root, group, terms, len)
  local t = root:add(f.joined, tvb(HEADER_LEN, len))
  local names, n, missing = {}, 0, {}
  for r = 0, group - 1 do
    local byte = tvb(HEADER_LEN + math.floor(r / 8), 1)
    if band(byte:uint(), BIT[r % 8 + 1]) ~= 0 then
      t:add(f.joined_rank, byte, r)
      n = n + 1
      if n <= 16 then names[#names + 1] = tostring(r) end
    else
      missing[#missing + 1] = r
    end
  end
  if n > 16 then names[#names + 1] = string.format("... (%d in all)", n) end
  for i = 1, math.min(#missing, 64) do t:add(f.not_joined_rank, missing[i]):set_generated() end
  local extra = 0
  for r = group, len * 8 - 1 do
    if band(tvb(HEADER_LEN + math.floor(r / 8), 1):uint(), BIT[r % 8 + 1]) ~= 0 then extra = extra + 1 end
  end
  t:append_text(n == 0 and " (none)" or (" (ranks " .. table.concat(names, ", ") .. ")"))
  if extra > 0 then
    t:add_proto_expert_info(ef.bad_session, string.format("%d bit(s) set past rank %d (group %d)", extra,
      group - 1, group))
  end
  if n ~= terms then
    t:add_proto_expert_info(ef.bad_session, string.format("The bitmap names %d rank(s), terms says %d joined",
      n, terms))
  end
  return table.concat(names, ",")
end

---------------------------------------------------------------------------
-- Main

local function dissect(tvb, pinfo, tree)
  local len = tvb:len()
  pinfo.cols.protocol = "PRISM"
  local root = tree:add(prism, tvb())
  if len < HEADER_LEN then
    root:add_proto_expert_info(ef.short_header, string.format("%d bytes: shorter than the 32-byte header", len))
    if len >= 2 then root:add(f.magic, tvb(0, 2)) end
    pinfo.cols.info = string.format("PRISM (short: %d bytes)", len)
    return len
  end

  local magic = tvb(0, 2):uint()
  local version = tvb(2, 1):uint()
  local kind = tvb(3, 1):uint()
  local job, op, chunk = tvb(4, 4):uint(), tvb(8, 4):uint(), tvb(12, 4):uint()
  local sender, group, terms, count = tvb(16, 2):uint(), tvb(18, 2):uint(), tvb(20, 2):uint(), tvb(22, 2):uint()
  local dtype, out_dtype, policy = tvb(24, 1):uint(), tvb(25, 1):uint(), tvb(26, 1):uint()
  local encoding, transport, exceptions = tvb(27, 1):uint(), tvb(28, 1):uint(), tvb(29, 1):uint()
  local flags, status = tvb(30, 1):uint(), tvb(31, 1):uint()

  -- The job kinds: sessions and pools (no descriptor, op a nonce).
  local session = kind == KIND_JOIN or kind == KIND_JOINED or kind == KIND_ALLOC or kind == KIND_ALLOCATED or
                  kind == KIND_LEAVE or kind == KIND_LEFT
  local complete = kind == KIND_JOINED and band(status, JOINED_COMPLETE) ~= 0
  -- QUERY and STATUS: a CONTRIB's header without its elements (PROTOCOL.md, Queries).
  local query = kind == KIND_QUERY or kind == KIND_STATUS
  if session then
    root:append_text(string.format(", %s%s, Job: %d, Nonce: 0x%08x, Rank: %d", code_name(KIND, kind),
      complete and " COMPLETE" or "", job, op, sender))
  else
    root:append_text(string.format(", %s, Job: %d, Op: %d, Chunk: %d", code_name(KIND, kind), job, op, chunk))
  end
  local ht = root:add(tvb(0, HEADER_LEN), "Header")

  local it = ht:add(f.magic, tvb(0, 2))
  if magic ~= 0x5052 then
    it:add_proto_expert_info(ef.bad_magic, string.format("Bad magic 0x%04x (expected 0x5052)", magic))
  end
  it = ht:add(f.version, tvb(2, 1))
  if version ~= 1 then
    it:add_proto_expert_info(ef.bad_version, string.format("Unsupported version %d (expected 1)", version))
  end
  it = ht:add(f.kind, tvb(3, 1))
  if not KIND[kind] then it:add_proto_expert_info(ef.bad_code, string.format("Unknown kind %d", kind)) end
  ht:add(f.job, tvb(4, 4))
  it = ht:add(f.op, tvb(8, 4))
  if session then
    -- PROTOCOL.md, Sessions: op is the rank's nonce (random, non-zero); a JOINED echoes it.
    it:append_text(" (the nonce)")
    local ni = it:add(f.nonce, tvb(8, 4))
    if op == 0 then
      ni:add_proto_expert_info(ef.bad_session, (kind == KIND_JOIN or kind == KIND_ALLOC)
        and string.format("Nonce 0: a %s's nonce is non-zero (the switch refuses this one with NACK MALFORMED)",
          code_name(KIND, kind))
        or string.format("Nonce 0: a %s echoes a nonce, which is non-zero", code_name(KIND, kind)))
    end
  end
  it = ht:add(f.chunk, tvb(12, 4))
  if kind == KIND_JOINED then
    if complete then
      it:append_text(" (the session's first op number)")
      it:add(f.first_op, tvb(12, 4))
    elseif chunk ~= 0 then
      it:add_proto_expert_info(ef.bad_session, string.format(
        "Chunk %d on a JOINED without COMPLETE: the first op number is only given (and chunk non-zero) once complete",
        chunk))
    end
  elseif kind == KIND_ALLOCATED then
    it:append_text(" (the pool id)")
    it:add(f.pool, tvb(12, 4))
  elseif kind == KIND_JOIN then
    if chunk ~= 0 then
      -- A rank sends 0; a leaf forwarding its rank's JOIN sets its own first fresh op number.
      it:append_text(" (forwarded by a leaf: its first fresh op)")
      it:add(f.fresh_op, tvb(12, 4))
    else
      it:append_text(" (0: from the rank itself, or a leaf with nothing fresher)")
    end
  end
  it = ht:add(f.sender, tvb(16, 2))
  if kind == KIND_CONTRIB or kind == KIND_QUERY then it:append_text(" (rank)")
  elseif kind == KIND_PARTIAL then it:append_text(" (child switch)")
  elseif kind == KIND_RESULT or kind == KIND_NACK or kind == KIND_ALLOCATED or kind == KIND_STATUS then
    it:append_text(" (switch)")
  elseif session then
    local role = { [KIND_JOIN] = " (the joining rank)", [KIND_ALLOC] = " (the asking rank)",
                   [KIND_LEAVE] = " (the leaving rank)" }
    it:append_text(role[kind] or " (the rank it answers)")
    local ri = it:add(f.rank, tvb(16, 2))
    if group ~= 0 and sender >= group then
      ri:add_proto_expert_info(ef.bad_session, string.format(
        "Rank %d is outside the group (0..%d)%s", sender, group - 1,
        kind == KIND_JOIN and ": the switch refuses this JOIN with NACK MALFORMED" or ""))
    end
  end
  it = ht:add(f.group, tvb(18, 2))
  if group == 0 and kind ~= KIND_LEAVE then it:add_proto_expert_info(ef.bad_group, "Group 0") end
  it = ht:add(f.terms, tvb(20, 2))
  local terms_ok = true
  if kind == KIND_CONTRIB or kind == KIND_QUERY then terms_ok = terms == 1
  elseif kind == KIND_STATUS then
    terms_ok = terms <= group
    it:append_text(" (contributions received)")
  elseif kind == KIND_PARTIAL then terms_ok = terms >= 1 and terms <= group
  elseif kind == KIND_RESULT then terms_ok = terms == group
  elseif kind == KIND_NACK then
    -- OP_ABANDONED counts the contributions that had arrived; every other reason carries 0.
    if status == NACK_OP_ABANDONED then terms_ok = terms <= group else terms_ok = terms == 0 end
  elseif kind == KIND_JOIN or kind == KIND_ALLOC or kind == KIND_LEAVE then terms_ok = terms == 0
  elseif kind == KIND_ALLOCATED then
    terms_ok = terms >= 1
    it:append_text(" (the switch's shards)")
    it:add(f.shards, tvb(20, 2))
  elseif kind == KIND_LEFT then
    terms_ok = terms <= group
    it:append_text(" (ranks still bound)")
    it:add(f.still_bound, tvb(20, 2))
  elseif kind == KIND_JOINED then
    terms_ok = terms <= group
    it:append_text(" (ranks joined)")
    local ji = it:add(f.ranks_joined, tvb(20, 2))
    if complete and terms ~= group then
      ji:add_proto_expert_info(ef.bad_session, string.format(
        "COMPLETE, yet %d of %d ranks joined: COMPLETE means every rank has", terms, group))
    end
  end
  if not terms_ok then
    it:add_proto_expert_info(ef.bad_terms, string.format("Terms %d wrong for a %s with group %d",
      terms, code_name(KIND, kind), group))
  end
  it = ht:add(f.count, tvb(22, 2))
  if kind == KIND_NACK and count ~= 0 then
    it:add_proto_expert_info(ef.bad_count, "A NACK has count 0")
  elseif (session or query) and count ~= 0 then
    it:add_proto_expert_info(ef.bad_count, string.format("A %s has count 0", code_name(KIND, kind)))
  elseif KIND[kind] and kind ~= KIND_NACK and not session and not query and count == 0 then
    it:add_proto_expert_info(ef.bad_count, "Count 0: a data packet carries at least one element")
  end

  -- A NACK echoes the refused packet's descriptor codes, whatever they were:
  -- unknown codes there are not an error of the NACK.
  -- JOIN and JOINED have no descriptor: every one of its bytes is 0.
  local check_codes = kind ~= KIND_NACK and not session
  local function code_field(field, off, tbl, what, label)
    local v = tvb(off, 1):uint()
    local item = ht:add(field, tvb(off, 1))
    if session then
      if v ~= 0 then
        item:add_proto_expert_info(ef.bad_descriptor, string.format(
          "%s %d on a %s: it has no descriptor (must be 0)", what, v, code_name(KIND, kind)))
      else
        item:set_text(string.format("%s: 0 (none: a %s has no descriptor)", label, code_name(KIND, kind)))
      end
    elseif check_codes and not tbl[v] then
      item:add_proto_expert_info(ef.bad_code, string.format("Unknown %s code %d", what, v))
    end
    return item
  end
  code_field(f.dtype, 24, FORMAT_NAME, "dtype", "Input format (dtype)")
  code_field(f.out_dtype, 25, FORMAT_NAME, "out_dtype", "Result format (out_dtype)")
  code_field(f.policy, 26, POLICY, "policy", "Policy")
  it = code_field(f.encoding, 27, ENCODING, "encoding", "Encoding")
  if ENCODING[encoding] and not session then
    local ok = true
    if kind == KIND_CONTRIB or query then ok = encoding == ENC_DTYPE
    elseif kind == KIND_PARTIAL then ok = encoding ~= ENC_DTYPE
    elseif kind == KIND_RESULT then ok = encoding == ENC_OUT_DTYPE end
    if not ok then
      it:add_proto_expert_info(ef.bad_encoding, string.format("Encoding %d not allowed for a %s",
        encoding, code_name(KIND, kind)))
    end
  end
  code_field(f.transport, 28, TRANSPORT, "transport", "Transport")
  code_field(f.exceptions, 29, EXCEPTIONS, "exceptions", "Exceptions")

  local fr = tvb(30, 1)
  local ft = ht:add(f.flags, fr)
  local fnames = bit_names(flags, FLAG_NAMES)
  if fnames ~= "" then ft:append_text(" (" .. fnames .. ")") end
  ft:add(f.flags_retransmit, fr)
  ft:add(f.flags_last_chunk, fr)
  ft:add(f.flags_sideband, fr)
  ft:add(f.flags_reserved, fr)
  if (session or query) and flags ~= 0 then
    ft:add_proto_expert_info(ef.bad_flags, string.format("Flags 0x%02x on a %s: it carries none (must be 0)", flags,
      code_name(KIND, kind)))
  elseif band(flags, 0xF8) ~= 0 then
    ft:add_proto_expert_info(ef.bad_flags, string.format("Reserved flag bits set: 0x%02x", band(flags, 0xF8)))
  end
  if band(flags, FLAG_SIDEBAND) ~= 0 and kind == KIND_CONTRIB then
    ft:add_proto_expert_info(ef.bad_flags, "SIDEBAND is not allowed on a CONTRIB (it has no flags to report)")
  end
  if band(flags, FLAG_SIDEBAND) ~= 0 and encoding == ENC_KULISCH and kind ~= KIND_NACK and not session then
    ft:add_proto_expert_info(ef.bad_flags, "SIDEBAND is not allowed on a Kulisch partial (lane records carry their own)")
  end
  if band(flags, FLAG_RETRANSMIT) ~= 0 and not session then
    ft:add_proto_expert_info(ef.retransmit)
  end

  local sr = tvb(31, 1)
  local stt = ht:add(f.status, sr)
  if kind == KIND_RESULT then
    local snames = bit_names(status, STATUS_NAMES)
    if snames ~= "" then stt:append_text(" (" .. snames .. ")") end
    stt:add(f.status_overflow, sr)
    stt:add(f.status_invalid, sr)
    stt:add(f.status_nan_input, sr)
    stt:add(f.status_reserved, sr)
    if band(status, 0xF8) ~= 0 then
      stt:add_proto_expert_info(ef.bad_status, string.format("Reserved status bits set: 0x%02x", band(status, 0xF8)))
    elseif status ~= 0 then
      stt:add_proto_expert_info(ef.result_status, "Result flags: " .. snames)
    end
  elseif kind == KIND_NACK then
    local ri = stt:add(f.nack_reason, sr)
    if NACK_REASON[status] then
      stt:append_text(" (" .. NACK_REASON[status] .. ")")
      ri:append_text(": " .. NACK_REASON_TEXT[status])
      ri:add_proto_expert_info(ef.nack, "NACK: " .. NACK_REASON[status] .. " (" .. NACK_REASON_TEXT[status] .. ")")
    else
      ri:add_proto_expert_info(ef.bad_code, string.format("Unknown NACK reason %d", status))
    end
  elseif kind == KIND_STATUS then
    local qi = stt:add(f.query_status, sr)
    if QUERY_STATUS[status] then
      stt:append_text(" (" .. QUERY_STATUS[status] .. ")")
      qi:append_text(": " .. QUERY_STATUS_TEXT[status])
    else
      stt:add_proto_expert_info(ef.bad_status, string.format(
        "STATUS %d: a STATUS is 1 HELD or 0 MISSING", status))
    end
  elseif kind == KIND_JOINED then
    if complete then stt:append_text(" (COMPLETE)") end
    local ci = stt:add(f.status_complete, sr)
    stt:add(f.status_joined_reserved, sr)
    if band(status, 0xFE) ~= 0 then
      stt:add_proto_expert_info(ef.bad_status, string.format(
        "Reserved JOINED status bits set: 0x%02x (only bit0 COMPLETE exists)", band(status, 0xFE)))
    end
    if complete then
      ci:add_proto_expert_info(ef.session_complete, string.format(
        "Session complete: rank %d numbers its ops from %d", sender, chunk))
    end
  elseif status ~= 0 and KIND[kind] then
    stt:add_proto_expert_info(ef.bad_status, string.format("Status must be 0 on a %s", code_name(KIND, kind)))
  end

  -- Steering: which shard's port a packet to a switch went to, and, with the shards preference, the rule's.
  if kind == KIND_CONTRIB or kind == KIND_PARTIAL or kind == KIND_QUERY or kind == KIND_JOIN or kind == KIND_ALLOC or
     kind == KIND_LEAVE then
    local at = pinfo.dst_port - prism.prefs.udp_port
    if prism.prefs.udp_port ~= 0 and at >= 0 and at < port_count() then
      local pi = root:add(f.shard_port, at)
      pi:set_generated()
      local S = prism.prefs.shards
      if S >= 1 and S <= MAX_SHARDS then
        -- Lua numbers hold integers exactly below 2^53; job + op + chunk stays below 2^34: no wrapping.
        local want = ((kind == KIND_CONTRIB or kind == KIND_PARTIAL or kind == KIND_QUERY) and job + op + chunk or job) %
                     S
        local si = root:add(f.shard, want)
        si:set_generated()
        if want ~= at then
          si:add_proto_expert_info(ef.wrong_shard_port, string.format(
            "Sent to shard %d's port %d; the rule gives shard %d (port %d) with %d shards: the switch passes it on " ..
            "in software", at, pinfo.dst_port, want, prism.prefs.udp_port + want, S))
        end
      end
    end
  end

  -- Info column
  local info
  if session then
    info = string.format("%s job=%d nonce=0x%08x rank=%d", code_name(KIND, kind), job, op, sender)
  else
    info = string.format("%s job=%d op=%d chunk=%d sender=%d", code_name(KIND, kind), job, op, chunk, sender)
  end
  if kind == KIND_JOIN then
    info = info .. string.format(" group=%d", group)
    if chunk ~= 0 then info = info .. string.format(" fresh_op=%d", chunk) end
  elseif kind == KIND_ALLOC then
    info = info .. string.format(" group=%d", group)
  elseif kind == KIND_ALLOCATED then
    info = info .. string.format(" pool=%d group=%d shards=%d", chunk, group, terms)
  elseif kind == KIND_LEFT then
    info = info .. string.format(" still_bound=%d/%d", terms, group)
  elseif kind == KIND_JOINED then
    info = info .. string.format(" joined=%d/%d", terms, group)
    if complete then info = info .. string.format(" COMPLETE first_op=%d", chunk) end
  elseif kind == KIND_QUERY then
    info = info .. string.format(" group=%d", group)
  elseif kind == KIND_STATUS then
    info = info .. string.format(" %s terms=%d/%d", code_name(QUERY_STATUS, status), terms, group)
  elseif kind == KIND_NACK then
    info = info .. " reason=" .. code_name(NACK_REASON, status)
    if status == NACK_OP_ABANDONED then info = info .. string.format(" terms=%d/%d", terms, group) end
  elseif KIND[kind] then
    local fmt = encoding == ENC_DTYPE and dtype or out_dtype
    if encoding == ENC_KULISCH then
      info = info .. string.format(" terms=%d/%d lanes=%d kulisch", terms, group, count)
    else
      info = info .. string.format(" terms=%d/%d %dx%s", terms, group, count, code_name(FORMAT_NAME, fmt))
    end
    if kind == KIND_RESULT and status ~= 0 then info = info .. " status=" .. bit_names(status, STATUS_NAMES) end
  end
  if fnames ~= "" then info = info .. " [" .. fnames .. "]" end
  if magic ~= 0x5052 or version ~= 1 then info = info .. " (bad magic/version)" end
  pinfo.cols.info = info

  -- Body
  local body_len = len - HEADER_LEN
  if session then
    local bitmap_len = math.floor((group + 7) / 8)
    if kind == KIND_JOINED and body_len ~= 0 and body_len == bitmap_len then
      local joined = dissect_joined(tvb, root, group, terms, bitmap_len)
      if joined ~= "" then pinfo.cols.info:append(" ranks=" .. joined) end
    elseif kind == KIND_ALLOCATED and body_len == ALLOCATED_BODY_LEN then
      local bt = root:add(tvb(HEADER_LEN, body_len), "Pool settings")
      bt:add(f.slot_quota, tvb(HEADER_LEN, 4))
      bt:add(f.idle_timeout, tvb(HEADER_LEN + 4, 4))
      pinfo.cols.info:append(string.format(" quota=%d idle_ms=%d", tvb(HEADER_LEN, 4):uint(),
        tvb(HEADER_LEN + 4, 4):uint()))
    elseif kind == KIND_ALLOC and body_len == ALLOCATED_BODY_LEN then
      root:add(tvb(HEADER_LEN, body_len), "Padding (as large as the ALLOCATED it asks for)")
    elseif kind == KIND_ALLOCATED then
      if body_len ~= 0 then root:add(f.body, tvb(HEADER_LEN, body_len)) end
      root:add_proto_expert_info(ef.bad_length, string.format(
        "An ALLOCATED's body is %d bytes (slot_quota, idle_timeout_ms), this one has %d bytes",
        ALLOCATED_BODY_LEN, body_len))
    elseif body_len ~= 0 then
      root:add(f.body, tvb(HEADER_LEN, body_len))
      if kind == KIND_JOINED then
        root:add_proto_expert_info(ef.bad_length, string.format(
          "A JOINED's body is empty or a bitmap of %d bytes (group %d), this one has %d bytes",
          bitmap_len, group, body_len))
      else
        root:add_proto_expert_info(ef.bad_length, string.format("A %s has no body, this one has %d bytes",
          code_name(KIND, kind), body_len))
      end
    end
  elseif kind == KIND_NACK then
    local bitmap_len = math.floor((group + 7) / 8)
    if status == NACK_OP_ABANDONED and body_len ~= 0 and body_len == bitmap_len then
      local missing = dissect_missing(tvb, root, group, terms, bitmap_len)
      if missing ~= "" then pinfo.cols.info:append(" missing=" .. missing) end
    elseif body_len ~= 0 then
      root:add(f.body, tvb(HEADER_LEN, body_len))
      if status == NACK_OP_ABANDONED then
        root:add_proto_expert_info(ef.bad_length, string.format(
          "An OP_ABANDONED NACK's body is empty or a bitmap of %d bytes (group %d), this one has %d bytes",
          bitmap_len, group, body_len))
      else
        root:add_proto_expert_info(ef.bad_length, string.format("A NACK has an empty body, this one has %d bytes", body_len))
      end
    end
  elseif query then
    local bitmap_len = math.floor((group + 7) / 8)
    if kind == KIND_STATUS and body_len ~= 0 and body_len == bitmap_len then
      local missing = dissect_missing(tvb, root, group, terms, bitmap_len)
      if missing ~= "" then pinfo.cols.info:append(" missing=" .. missing) end
    elseif body_len ~= 0 then
      root:add(f.body, tvb(HEADER_LEN, body_len))
      root:add_proto_expert_info(ef.bad_length, kind == KIND_STATUS and string.format(
        "A STATUS's body is empty or a bitmap of %d bytes (group %d), this one has %d bytes", bitmap_len, group,
        body_len) or string.format("A QUERY has no body, this one has %d bytes", body_len))
    end
  elseif encoding == ENC_DTYPE or encoding == ENC_OUT_DTYPE then
    local fmt = encoding == ENC_DTYPE and dtype or out_dtype
    dissect_elements(tvb, pinfo, root, HEADER_LEN, count, fmt, band(flags, FLAG_SIDEBAND) ~= 0)
  elseif encoding == ENC_KULISCH then
    dissect_kulisch(tvb, pinfo, root, HEADER_LEN, count, dtype)
  elseif body_len > 0 then
    root:add(f.body, tvb(HEADER_LEN, body_len))
  end
  return len
end

function prism.dissector(tvb, pinfo, tree)
  return dissect(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
  if not prism.prefs.heuristic then return false end
  if tvb:len() < HEADER_LEN then return false end
  if tvb(0, 2):uint() ~= 0x5052 or tvb(2, 1):uint() ~= 1 then return false end
  local kind = tvb(3, 1):uint()
  if kind < 1 or kind > KIND_MAX then return false end
  dissect(tvb, pinfo, tree)
  return true
end

register_ports(DEFAULT_PORT, MAX_SHARDS)
udp_table:add_for_decode_as(prism)
prism:register_heuristic("udp", heuristic)
