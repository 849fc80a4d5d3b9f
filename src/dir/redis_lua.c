/* The Lua scripts of the redis:// directory backend. Each operation is one
 * script, so Redis runs it atomically: the identical-replay check, the
 * conflict error and READY happen in the same step as the publish, and
 * release compares lease expiries with the server's own TIME. Scripts fail
 * before their first write, so a refused call changes nothing.
 * KEYS: 1 meta (hash: slots, state), 2 slots (hash "<slot>@<publisher>" ->
 * entry: digest line and table), 3 hb (hash "<slot>@<publisher>" -> time),
 * 4 leases (hash holder -> "expiry epoch"), 5 versions (sorted set),
 * 6 members (hash slot -> "<geometry> <publisher> ..." in joining order),
 * 7 cuts (the model's: hash holder -> cuts record; no version involved),
 * 8 cutgen (the model's: hash holder -> the record's generation, 16 hex
 * digits of its rsd64 digest, written in the same script as the record).
 * ARGV[1]: "version V of 'M'" for messages. */
#include "dir/redis_impl.h"

#define PRELUDE                                                             \
    "local function now()\n"                                                \
    "  local t = redis.call('TIME')\n"                                      \
    "  return tonumber(t[1]) + tonumber(t[2]) / 1000000\n"                  \
    "end\n"                                                                 \
    "local function fail(code, msg)\n"                                      \
    "  return redis.error_reply(code .. ' ' .. msg)\n"                      \
    "end\n"                                                                 \
    "local function meta()\n"                                               \
    "  local m = redis.call('HMGET', KEYS[1], 'slots', 'state')\n"          \
    "  if not m[1] then return nil, nil end\n"                              \
    "  return tonumber(m[1]), m[2]\n"                                       \
    "end\n"                                                                 \
    "local function missing()\n"                                            \
    "  return fail('RSINPUT', ARGV[1] .. ' was never created')\n"           \
    "end\n"                                                                 \
    "local function publishers(rec)\n"                                      \
    "  local out = {}\n"                                                    \
    "  for p in string.gmatch(string.sub(rec, 18), '%S+') do\n"             \
    "    table.insert(out, p)\n"                                            \
    "  end\n"                                                               \
    "  return out\n"                                                        \
    "end\n"                                                                 \
    "local function out_of_range(n, slot)\n"                                \
    "  return fail('RSINPUT', ARGV[1] .. ' has ' .. n .. ' slots: slot ' .. " \
    "slot .. ' is out of range')\n"                                         \
    "end\n"

/* ARGV: 2 slots, 3 version */
static const char create_src[] = PRELUDE
    "local s = redis.call('HGET', KEYS[1], 'slots')\n"
    "if s then\n"
    "  if s ~= ARGV[2] then\n"
    "    return fail('RSINPUT', ARGV[1] .. ' exists with ' .. s ..\n"
    "                ' slots, not ' .. ARGV[2])\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'slots', ARGV[2], 'state', 'PENDING')\n"
    "redis.call('ZADD', KEYS[5], ARGV[3], ARGV[3])\n"
    "return 1\n";

/* ARGV: 2 slot, 3 publisher, 4 geometry key (16 hex), 5 entry. A
 * publisher already in the slot replaces its own entry. */
static const char publish_src[] = PRELUDE
    "local n, state = meta()\n"
    "if not n then return missing() end\n"
    "local slot = tonumber(ARGV[2])\n"
    "if slot >= n then return out_of_range(n, ARGV[2]) end\n"
    "if state == 'RELEASED' then\n"
    "  return fail('RSINPUT', ARGV[1] .. ' is released: slot ' .. ARGV[2] ..\n"
    "              ' cannot be published')\n"
    "end\n"
    "local rec = redis.call('HGET', KEYS[6], ARGV[2])\n"
    "local pubs, member = {}, false\n"
    "if rec then\n"
    "  pubs = publishers(rec)\n"
    "  local g = string.sub(rec, 1, 16)\n"
    "  if g ~= ARGV[4] then\n"
    "    return fail('RSINPUT', ARGV[1] .. ': slot ' .. ARGV[2] ..\n"
    "      \": conflicting geometry from publisher '\" .. ARGV[3] ..\n"
    "      \"' (key \" .. ARGV[4] .. \"; the slot's key is \" .. g ..\n"
    "      \", published by '\" .. table.concat(pubs, \"', '\") ..\n"
    "      \"'): the publishers of a slot must hold identical shards \" ..\n"
    "      '(tensor names, dtypes, full shapes, offsets, shapes)')\n"
    "  end\n"
    "  for _, p in ipairs(pubs) do\n"
    "    if p == ARGV[3] then member = true end\n"
    "  end\n"
    "  if not member and #pubs >= 64 then\n"
    "    return fail('RSINPUT', ARGV[1] .. ': slot ' .. ARGV[2] ..\n"
    "      \" already has 64 publishers: '\" .. ARGV[3] .. \"' cannot join\")\n"
    "  end\n"
    "end\n"
    "local field = ARGV[2] .. '@' .. ARGV[3]\n"
    "redis.call('HSET', KEYS[2], field, ARGV[5])\n"
    "if not rec then\n"
    "  redis.call('HSET', KEYS[6], ARGV[2], ARGV[4] .. ' ' .. ARGV[3])\n"
    "elseif not member then\n"
    "  redis.call('HSET', KEYS[6], ARGV[2], rec .. ' ' .. ARGV[3])\n"
    "end\n"
    "redis.call('HSET', KEYS[3], field, string.format('%.6f', now()))\n"
    "if state ~= 'READY' and redis.call('HLEN', KEYS[6]) == n then\n"
    "  redis.call('HSET', KEYS[1], 'state', 'READY')\n"
    "end\n"
    "return 1\n";

/* ARGV: 2 slot, 3 publisher. A heartbeat after release writes nothing;
 * one of a publisher without an entry in the slot (never published, or
 * lost by the server) is refused. */
static const char heartbeat_src[] = PRELUDE
    "local n, state = meta()\n"
    "if not n then return missing() end\n"
    "if tonumber(ARGV[2]) >= n then return out_of_range(n, ARGV[2]) end\n"
    "if state == 'RELEASED' then return 0 end\n"
    "local field = ARGV[2] .. '@' .. ARGV[3]\n"
    "if redis.call('HEXISTS', KEYS[2], field) == 0 then\n"
    "  return fail('RSINCOMPLETE', ARGV[1] .. ': slot ' .. ARGV[2] ..\n"
    "    \" has no table of publisher '\" .. ARGV[3] ..\n"
    "    \"' (never published, or lost)\")\n"
    "end\n"
    "redis.call('HSET', KEYS[3], field, string.format('%.6f', now()))\n"
    "return 1\n";

/* -> {} or {slots, state, published} */
static const char lookup_src[] =
    "local m = redis.call('HMGET', KEYS[1], 'slots', 'state', "
    "'released_by')\n"
    "if not m[1] then return {} end\n"
    "local p = 0\n"
    "if m[2] ~= 'RELEASED' then p = redis.call('HLEN', KEYS[6]) end\n"
    "return {m[1], m[2], p, m[3] or ''}\n";

/* -> {time sec, time usec, {published slots},
 *     {"<slot>@<publisher>", time, ...}} */
static const char slot_status_src[] =
    "local t = redis.call('TIME')\n"
    "return {t[1], t[2], redis.call('HKEYS', KEYS[6]),\n"
    "        redis.call('HGETALL', KEYS[3])}\n";

/* ARGV: 2 slot -> {time sec, time usec, publisher, entry, heartbeat or
 * false, ...} in joining order */
static const char read_src[] = PRELUDE
    "local n, state = meta()\n"
    "if not n then return missing() end\n"
    "if state ~= 'READY' then\n"
    "  local p = 0\n"
    "  if state ~= 'RELEASED' then p = redis.call('HLEN', KEYS[6]) end\n"
    "  return fail('RSINCOMPLETE', ARGV[1] .. ' is ' .. state .. ' (' ..\n"
    "    p .. ' of ' .. n .. ' slots published): tables are read only ' ..\n"
    "    'from READY versions')\n"
    "end\n"
    "if tonumber(ARGV[2]) >= n then return out_of_range(n, ARGV[2]) end\n"
    "local t = redis.call('TIME')\n"
    "local out = {t[1], t[2]}\n"
    "local rec = redis.call('HGET', KEYS[6], ARGV[2])\n"
    "if not rec then return out end\n"
    "for _, p in ipairs(publishers(rec)) do\n"
    "  local field = ARGV[2] .. '@' .. p\n"
    "  local e = redis.call('HGET', KEYS[2], field)\n"
    "  if not e then\n"
    "    return fail('RSINCOMPLETE', ARGV[1] .. ': slot ' .. ARGV[2] ..\n"
    "      \"'s table of publisher '\" .. p .. \"' is missing\")\n"
    "  end\n"
    "  table.insert(out, p)\n"
    "  table.insert(out, e)\n"
    "  table.insert(out, redis.call('HGET', KEYS[3], field))\n"
    "end\n"
    "return out\n";

/* ARGV: 2 key prefix "rs:{M}:" -> {version, slots, state, published, ...}.
 * The versions' keys share the model's hash tag with KEYS[5]. */
static const char list_src[] =
    "local out = {}\n"
    "for _, v in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do\n"
    "  local base = ARGV[2] .. v\n"
    "  local m = redis.call('HMGET', base .. ':meta', 'slots', 'state')\n"
    "  if m[1] then\n"
    "    local p = 0\n"
    "    if m[2] ~= 'RELEASED' then\n"
    "      p = redis.call('HLEN', base .. ':members')\n"
    "    end\n"
    "    table.insert(out, v)\n"
    "    table.insert(out, m[1])\n"
    "    table.insert(out, m[2])\n"
    "    table.insert(out, p)\n"
    "  end\n"
    "end\n"
    "return out\n";

/* ARGV: 2 holder, 3 ttl seconds, 4 epoch to renew ("0": take a new one)
 * -> the lease's epoch. A lease is "<expiry> <epoch>"; meta's lease_epoch
 * is the last epoch handed out. */
static const char lease_src[] = PRELUDE
    "local n, state = meta()\n"
    "if not n then return missing() end\n"
    "local who = \"lease '\" .. ARGV[2] .. \"' (epoch \" .. ARGV[4] .. ')'\n"
    "if state == 'RELEASED' then\n"
    "  local by = redis.call('HGET', KEYS[1], 'released_by')\n"
    "  by = by and (\" by '\" .. by .. \"'\") or ''\n"
    "  if ARGV[4] == '0' then\n"
    "    return fail('RSINCOMPLETE', ARGV[1] .. ' was released' .. by ..\n"
    "                ': no lease can be taken')\n"
    "  end\n"
    "  return fail('RSINCOMPLETE', ARGV[1] .. ' was released' .. by ..\n"
    "              ': ' .. who .. ' ended with it')\n"
    "end\n"
    "local t = now()\n"
    "local epoch\n"
    "if ARGV[4] == '0' then\n"
    "  local v = redis.call('HGET', KEYS[4], ARGV[2])\n"
    "  local e, g = nil, nil\n"
    "  if v then e, g = string.match(v, '^(%S+) (%d+)$') end\n"
    "  if e and tonumber(e) > t then\n"
    "    return fail('RSINPUT', ARGV[1] .. \": lease holder name '\" ..\n"
    "      ARGV[2] .. \"' is taken: another receiver holds a live lease \" ..\n"
    "      'under it (epoch ' .. g .. ', ' ..\n"
    "      string.format('%.2f', tonumber(e) - t) .. ' s left); every ' ..\n"
    "      'receiver needs its own holder name')\n"
    "  end\n"
    "  epoch = redis.call('HINCRBY', KEYS[1], 'lease_epoch', 1)\n"
    "else\n"
    "  local v = redis.call('HGET', KEYS[4], ARGV[2])\n"
    "  if not v then\n"
    "    return fail('RSINCOMPLETE', ARGV[1] .. ': ' .. who ..\n"
    "                ' is not held (dropped or never taken)')\n"
    "  end\n"
    "  local e, g = string.match(v, '^(%S+) (%d+)$')\n"
    "  if g ~= ARGV[4] then\n"
    "    return fail('RSINCOMPLETE', ARGV[1] .. ': ' .. who ..\n"
    "                ' was taken again (now epoch ' .. (g or '0') .. ')')\n"
    "  end\n"
    "  if tonumber(e) <= t then\n"
    "    return fail('RSINCOMPLETE', ARGV[1] .. ': ' .. who .. ' lapsed ' ..\n"
    "                string.format('%.2f', t - tonumber(e)) .. ' s ago')\n"
    "  end\n"
    "  epoch = tonumber(ARGV[4])\n"
    "end\n"
    "local expiry = t + tonumber(ARGV[3])\n"
    "redis.call('HSET', KEYS[4], ARGV[2],\n"
    "           string.format('%.6f %d', expiry, epoch))\n"
    "return epoch\n";

/* ARGV: 2 holder */
static const char unlease_src[] = PRELUDE
    "local n = meta()\n"
    "if not n then return missing() end\n"
    "return redis.call('HDEL', KEYS[4], ARGV[2])\n";

/* ARGV: 2 "1" to release whatever the leases (abandon), 3 who releases
 * -> live leases dropped */
static const char release_src[] = PRELUDE
    "local n, state = meta()\n"
    "if not n then return missing() end\n"
    "if state == 'RELEASED' then return 0 end\n"
    "local t = now()\n"
    "local l = redis.call('HGETALL', KEYS[4])\n"
    "local live, first, left = 0, nil, 0\n"
    "for i = 1, #l, 2 do\n"
    "  local e = tonumber(string.match(l[i + 1], '^%S+'))\n"
    "  if e and e > t then\n"
    "    live = live + 1\n"
    "    if not first then first, left = l[i], e - t end\n"
    "  end\n"
    "end\n"
    "if live > 0 and ARGV[2] ~= '1' then\n"
    "  return fail('RSINCOMPLETE', ARGV[1] .. \" cannot be released: \" ..\n"
    "    \"leased by '\" .. first .. \"' for \" ..\n"
    "    string.format('%.2f', left) .. ' s more (' .. live ..\n"
    "    ' live lease' .. (live == 1 and '' or 's') .. ')')\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'state', 'RELEASED', 'released_by',\n"
    "           ARGV[3])\n"
    "redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[6])\n"
    "return live\n";

/* The generation of holder h's record: its stamp, or for a record stored
 * without one (around the API) "sha1:" and a SHA-1 of its bytes taken
 * here, so no record leaves the server to be compared. */
#define CUT_GEN                                                             \
    "local function gen(h)\n"                                               \
    "  local g = redis.call('HGET', KEYS[8], h)\n"                          \
    "  if g then return g end\n"                                            \
    "  return 'sha1:' .. redis.sha1hex(redis.call('HGET', KEYS[7], h))\n"   \
    "end\n"

/* ARGV: 2 holder, 3 record, 4 its generation. The record and its
 * generation are one field each, replaced together (holders writing at
 * once never lose each other's records); the same bytes again write
 * nothing but a missing stamp. */
static const char put_cuts_src[] =
    "if redis.call('HGET', KEYS[7], ARGV[2]) == ARGV[3] then\n"
    "  if redis.call('HGET', KEYS[8], ARGV[2]) ~= ARGV[4] then\n"
    "    redis.call('HSET', KEYS[8], ARGV[2], ARGV[4])\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "redis.call('HSET', KEYS[7], ARGV[2], ARGV[3])\n"
    "redis.call('HSET', KEYS[8], ARGV[2], ARGV[4])\n"
    "return 1\n";

/* ARGV: 2 "<slot>@<publisher>", 3 the document's digest (16 hex), 4 the
 * document (absent: only compare). 0: the stored document has that digest
 * (nothing written); -1: it has not and no document came; 1: written. */
static const char geometry_put_src[] =
    "if redis.call('HGET', KEYS[10], ARGV[2]) == ARGV[3] and\n"
    "   redis.call('HEXISTS', KEYS[9], ARGV[2]) == 1 then return 0 end\n"
    "if not ARGV[4] then return -1 end\n"
    "redis.call('HSET', KEYS[9], ARGV[2], ARGV[4])\n"
    "redis.call('HSET', KEYS[10], ARGV[2], ARGV[3])\n"
    "return 1\n";

/* ARGV: 2 "<slot>@<publisher>" -> {digest, document}, or {} for none */
static const char geometry_get_src[] =
    "local d = redis.call('HGET', KEYS[9], ARGV[2])\n"
    "if not d then return {} end\n"
    "return {redis.call('HGET', KEYS[10], ARGV[2]) or '', d}\n";

/* ARGV: 2 the size cap, 3 (optional) one holder -> {holder, generation,
 * record or its size (an integer) when above the cap, ...} */
static const char read_cuts_src[] = CUT_GEN
    "local out = {}\n"
    "local cap = tonumber(ARGV[2])\n"
    "local hs = ARGV[3] and {ARGV[3]} or redis.call('HKEYS', KEYS[7])\n"
    "for _, h in ipairs(hs) do\n"
    "  if redis.call('HEXISTS', KEYS[7], h) == 1 then\n"
    "    local n = redis.call('HSTRLEN', KEYS[7], h)\n"
    "    table.insert(out, h)\n"
    "    table.insert(out, gen(h))\n"
    "    if n > cap then table.insert(out, n)\n"
    "    else table.insert(out, redis.call('HGET', KEYS[7], h)) end\n"
    "  end\n"
    "end\n"
    "return out\n";

/* -> {holder, generation, size, ...}: no record leaves the server */
static const char list_cuts_src[] = CUT_GEN
    "local out = {}\n"
    "for _, h in ipairs(redis.call('HKEYS', KEYS[7])) do\n"
    "  table.insert(out, h)\n"
    "  table.insert(out, gen(h))\n"
    "  table.insert(out, redis.call('HSTRLEN', KEYS[7], h))\n"
    "end\n"
    "return out\n";

/* ARGV: 2 holder */
static const char drop_cuts_src[] =
    "redis.call('HDEL', KEYS[8], ARGV[2])\n"
    "return redis.call('HDEL', KEYS[7], ARGV[2])\n";

/* ARGV: 2 the record's field in meta ("group:<name>"), 3 "1" when a
 * record is expected, 4 the expected record, 5 (optional) the new record
 * -> {the record after the call or false, 1 when written}. Compare and
 * swap: dir_group.c computes records. */
static const char group_src[] = PRELUDE
    "local n = meta()\n"
    "if not n then return missing() end\n"
    "local cur = redis.call('HGET', KEYS[1], ARGV[2])\n"
    "if not ARGV[5] then return {cur, 0} end\n"
    "local same\n"
    "if ARGV[3] == '1' then same = (cur == ARGV[4]) else same = not cur end\n"
    "if not same then return {cur, 0} end\n"
    "redis.call('HSET', KEYS[1], ARGV[2], ARGV[5])\n"
    "return {ARGV[5], 1}\n";

/* -> {time sec, time usec, holder, "<expiry> <epoch>", ...} */
static const char leases_src[] = PRELUDE
    "local n = meta()\n"
    "if not n then return missing() end\n"
    "local t = redis.call('TIME')\n"
    "return {t[1], t[2], redis.call('HGETALL', KEYS[4])}\n";

const char *const rs__redis_script_src[RS_RLUA_COUNT] = {
    [RS_RLUA_CREATE] = create_src,
    [RS_RLUA_PUBLISH] = publish_src,
    [RS_RLUA_HEARTBEAT] = heartbeat_src,
    [RS_RLUA_LOOKUP] = lookup_src,
    [RS_RLUA_SLOT_STATUS] = slot_status_src,
    [RS_RLUA_READ] = read_src,
    [RS_RLUA_LIST] = list_src,
    [RS_RLUA_LEASE] = lease_src,
    [RS_RLUA_UNLEASE] = unlease_src,
    [RS_RLUA_RELEASE] = release_src,
    [RS_RLUA_PUT_CUTS] = put_cuts_src,
    [RS_RLUA_READ_CUTS] = read_cuts_src,
    [RS_RLUA_DROP_CUTS] = drop_cuts_src,
    [RS_RLUA_LIST_CUTS] = list_cuts_src,
    [RS_RLUA_GROUP] = group_src,
    [RS_RLUA_LEASES] = leases_src,
    [RS_RLUA_GEOMETRY_PUT] = geometry_put_src,
    [RS_RLUA_GEOMETRY_GET] = geometry_get_src,
};
