"""The Lua scripts of the Redis stores (mdss/stores/redis.py): each runs atomically on its key's node."""

# KEYS[1]: the key; ARGV[1]: the new value; ARGV[2]: SHA-1 of the value read, or "" for "only if absent".
# Returns 1, or {0, what the key holds} so that the loser needs no second round trip to read it.
CAS = """
local current = redis.call('GET', KEYS[1])
if ARGV[2] == '' then
    if current then return {0, current} end
elseif (not current) or redis.sha1hex(current) ~= ARGV[2] then
    return {0, current}
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""


# KEYS[1]: a head; KEYS[2..]: keys; ARGV[1]: SHA-1 of the head's value read; ARGV[2]: milliseconds since the epoch.
# Gives the keys that expiry (PEXPIREAT) if the head is unchanged: 1; else 0 and nothing changed.
EXPIRE_IF = """
local current = redis.call('GET', KEYS[1])
if (not current) or redis.sha1hex(current) ~= ARGV[1] then return 0 end
for i = 2, #KEYS do redis.call('PEXPIREAT', KEYS[i], ARGV[2]) end
return 1
"""


# KEYS[1]: the key; ARGV[1]: SHA-1 of the value read. Deletes it if unchanged (or absent): 1; else 0.
DELETE_IF = """
local current = redis.call('GET', KEYS[1])
if current and redis.sha1hex(current) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS[1]: a head, then for a seal the keys of nodes it writes; ARGV: the SHA-1 of its core as the writer saw it (20
# bytes), the tail bytes it saw, the record, the most bytes of the tail, and for a seal whether writers lag ('1' or
# '0'), the new core, then the nodes' values (set only if the seal puts its core in place). mdss._tail.apply
# (mdss._tail.swap with a core), in Lua: returns {1, the value after the writer's view} if the record was appended (or
# was there already), {3, the whole value} if so across a bridge (the writer held a core this one bridges from; a seal
# then only appends) or sealed, else {0, the current value} (refused; damaged framing too) or {2, it} (full).
TAIL = """
local function u32(s, i)
    local a, b, c, d = string.byte(s, i, i + 3)
    return ((a * 256 + b) * 256 + c) * 256 + d
end
local function be32(n)
    return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256,
        n % 256)
end
local function sha1(s)
    return (string.gsub(redis.sha1hex(s), '..', function(x) return string.char(tonumber(x, 16)) end))
end
-- The cores a head of mark bridges from (oldest first: {SHA-1, start, end}, counted from its first record), where its
-- tail starts, and the header's size, from the header at s's byte i (the first after the core); nil if impossible.
local function chain(s, i, mark)
    if mark == 0xC2 then
        if #s < i + 27 then return nil end
        local p, b = u32(s, i + 20), u32(s, i + 24)
        if b > p then return nil end
        return {{string.sub(s, i, i + 19), 0, p}}, b, 28
    end
    local n = string.byte(s, i)
    if not n or n < 2 or n > 8 or #s < i + 28 * n + 4 then return nil end
    local cores, at = {}, i + 1
    for k = 1, n do
        local c = {string.sub(s, at, at + 19), u32(s, at + 20), u32(s, at + 24)}
        if c[2] > c[3] then return nil end
        local q = cores[k - 1]
        if q and (c[2] < q[2] or c[2] > q[3] or q[3] > c[3]) then return nil end
        cores[k] = c
        at = at + 28
    end
    local b = u32(s, at)
    if b < cores[n][2] or b > cores[n][3] then return nil end
    return cores, b, 28 * n + 5
end
-- The records of v from at on, against rec: 'own' (its nonce is there), 'taken' (one touches a member of rec),
-- 'bad' (damaged framing) or 'clear'.
local function scan(v, at, rec)
    local nonce, nt = string.sub(rec, 3, 10), string.byte(rec, 11) or 0
    while at <= #v do
        if at + 10 > #v or at + 10 + 8 * string.byte(v, at + 10) > #v then return 'bad' end
        local h, l = string.byte(v, at, at + 1)
        if string.sub(v, at + 2, at + 9) == nonce then return 'own' end
        for t = 0, string.byte(v, at + 10) - 1 do
            local tok = string.sub(v, at + 11 + 8 * t, at + 18 + 8 * t)
            for u = 0, nt - 1 do
                if string.sub(rec, 12 + 8 * u, 19 + 8 * u) == tok then return 'taken' end
            end
        end
        at = at + 2 + h * 256 + l
    end
    if at ~= #v + 1 then return 'bad' end
    return 'clear'
end
local sha, seen, rec, cap = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local lagging, core = ARGV[5] == '1', ARGV[6]
-- An append by a writer holding the head's core reads only the header (and the bridge's) and the records after the
-- writer's view, and APPENDs: a GET of the whole head into Lua, and a SET of it, cost more than the rest together.
local h = not core and #rec > 0 and redis.call('GETRANGE', KEYS[1], 0, 24) or ''
if #h == 25 then
    local mark, tail, parents = string.byte(h, 1), 26 + u32(h, 22), 0
    if mark == 0xC2 then  -- the writer holds this core: its records start after the bridge (P, B: 8 bytes)
        local b = redis.call('GETRANGE', KEYS[1], tail + 19, tail + 26)
        if #b == 8 and u32(b, 5) <= u32(b, 1) then
            parents, tail = tail + 28 + u32(b, 1), tail + 28 + u32(b, 5)
        else
            mark = 0
        end
    elseif mark == 0xC3 then  -- after the bridges
        local cores, b, size = chain(redis.call('GETRANGE', KEYS[1], tail - 1, tail + 28 * 8 + 3), 1, mark)
        if cores then
            parents, tail = tail + size + cores[#cores][3], tail + size + b
        else
            mark = 0
        end
    end
    -- the last byte of the writer's view, then the records after it: none when the view passes the end
    local got = redis.call('GETRANGE', KEYS[1], tail + seen - 2, -1)
    if (mark == 0xC1 or mark == 0xC2 or mark == 0xC3) and string.sub(h, 2, 21) == sha and #got > 0 then
        local after, n = string.sub(got, 2), tail + seen - 2 + #got
        local found = 'bad'
        if parents <= n + 1 then found = scan(after, 1, rec) end
        if found == 'own' then return {1, after} end
        if found == 'clear' and n + 1 - tail + #rec <= cap then
            redis.call('APPEND', KEYS[1], rec)
            return {1, after .. rec}
        end
    end  -- anything else takes the whole head below, which answers as before
end
local v = redis.call('GET', KEYS[1])
if not v then return {0} end
local orig = v
-- cores: those this head bridges from, oldest first, each {SHA-1, where the records after it begin, where they ended}
local mark, tail, at, across, since, cores = string.byte(v, 1), 0, 0, false, 0, {}
if mark == 0xC1 or mark == 0xC2 or mark == 0xC3 then
    if #v < 25 then return {0, orig} end
    tail = 26 + u32(v, 22)
    if mark ~= 0xC1 then
        local found, b, size = chain(v, tail, mark)
        if not found or tail + size + found[#found][3] > #v + 1 then return {0, orig} end
        for k = 1, #found do
            cores[k] = {found[k][1], tail + size + found[k][2], tail + size + found[k][3]}
        end
        tail = tail + size + b
    end
    if string.sub(v, 2, 21) == sha then
        at = tail
    else
        local found = nil
        for i = #cores, 1, -1 do
            if cores[i][1] == sha then found = cores[i] break end
        end
        if not found then return {0, orig} end
        at, since, across = found[2], found[2], true
        if seen > found[3] - found[2] then return {0, orig} end
    end
else
    if sha1(v) ~= sha then return {0, orig} end
    v = string.char(193) .. sha .. be32(#v) .. v
    tail = #v + 1
    at = tail
end
at = at + seen
local from = at
if at > #v + 1 then return {0, orig} end
local found = scan(v, at, rec)
if found == 'own' then
    if across then return {3, v} end
    return {1, string.sub(v, from)}
end
if found ~= 'clear' then return {0, orig} end
if across and #v + 1 - since + #rec > cap then return {0, orig} end
if core and not across then
    -- bridged from this core, and (when writers lag: the sealer says so, or others appended over a sixteenth of the
    -- cap after its view) from those it bridges from while the records since the oldest's fit the cap
    local kept = {}
    if lagging or 16 * (#v + 1 - tail - seen) > cap then
        for k = 1, #cores do kept[k] = cores[k] end
    end
    kept[#kept + 1] = {sha, tail, #v + 1}
    while #kept > 1 and (#kept > 8 or #v + 1 - kept[1][2] + #rec > cap) do table.remove(kept, 1) end
    if #kept == 1 then
        local records = string.sub(v, tail)
        v = string.char(194) .. sha1(core) .. be32(#core) .. core .. sha .. be32(#records) .. be32(seen) .. records
            .. rec
    else
        local s0, parts = kept[1][2], {string.char(195), sha1(core), be32(#core), core, string.char(#kept)}
        for k = 1, #kept do
            parts[#parts + 1] = kept[k][1] .. be32(kept[k][2] - s0) .. be32(kept[k][3] - s0)
        end
        parts[#parts + 1] = be32(tail - s0 + seen)
        parts[#parts + 1] = string.sub(v, s0)
        parts[#parts + 1] = rec
        v = table.concat(parts)
    end
    redis.call('SET', KEYS[1], v)
    for i = 2, #KEYS do redis.call('SET', KEYS[i], ARGV[i + 5]) end
    return {3, v}
end
if #rec == 0 then return {3, v} end
if #v + 1 - tail + #rec > cap then return {2, orig} end
v = v .. rec
redis.call('SET', KEYS[1], v)
if across then return {3, v} end
return {1, string.sub(v, from)}
"""
