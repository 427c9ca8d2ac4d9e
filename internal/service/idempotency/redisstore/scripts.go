package redisstore

import "github.com/redis/go-redis/v9"

// Each KeyStore operation is one Lua script over the key's hash, so that it
// is atomic on the server without WATCH/MULTI round trips. The hash's fields:
//
//	state        in_progress | completed | failed_final
//	fingerprint  the claiming request's fingerprint
//	owner        the claim's owner token
//	lock_until   while in progress: the lock's end, server time in Unix ms
//	claimed_at   when the owner claimed the key, server time in Unix ms
//	status       once finished: the response status
//	header       once finished: the response header as JSON
//	body         once finished: the response body, raw bytes
//
// The key itself expires with the lock (PEXPIRE lockTTL) while in progress
// and after the ttl given to Complete once finished; lock_until backs the
// expiry up, so that a hash whose expiry was lost (PERSIST, a restore without
// TTLs) still counts as an expired claim. Scripts read the server's clock
// with TIME, which Redis 5 and later allow in scripts (effects replication).

// claimScript: KEYS[1] the key; ARGV[1] fingerprint, ARGV[2] the new owner
// token, ARGV[3] lockTTL in ms. Returns {"claimed"}, {"mismatch"},
// {"in_progress", remaining ms, age ms} or {"replay", status, header, body}.
// A claim without claimed_at (written before the field existed) has age 0.
var claimScript = redis.NewScript(`
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', key, 'state', 'fingerprint', 'lock_until', 'status', 'header', 'body', 'claimed_at')
local state, fp, lock_until = h[1], h[2], tonumber(h[3])
local expired = state == 'in_progress' and (lock_until == nil or lock_until <= now)
if not state or expired then
	redis.call('DEL', key)
	redis.call('HSET', key, 'state', 'in_progress', 'fingerprint', ARGV[1], 'owner', ARGV[2],
		'lock_until', now + tonumber(ARGV[3]), 'claimed_at', now)
	redis.call('PEXPIRE', key, ARGV[3])
	return {'claimed'}
end
if fp ~= ARGV[1] then
	return {'mismatch'}
end
if state == 'in_progress' then
	return {'in_progress', lock_until - now, now - (tonumber(h[7]) or now)}
end
return {'replay', tonumber(h[4]), h[5], h[6]}
`)

// ownerHolds starts the scripts that only the key's owner may run: it returns
// 0 unless KEYS[1] is in progress, held by the owner token ARGV[1], and its
// lock (by Redis's own clock) has not run out.
const ownerHolds = `
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', key, 'state', 'owner', 'lock_until')
local lock_until = tonumber(h[3])
if h[1] ~= 'in_progress' or h[2] ~= ARGV[1] or lock_until == nil or lock_until <= now then
	return 0
end
`

// completeScript: KEYS[1] the key; ARGV[1] owner token, ARGV[2] final state,
// ARGV[3] status, ARGV[4] header JSON, ARGV[5] body, ARGV[6] ttl in ms.
// Returns 1 when stored, 0 when the owner does not hold the key.
var completeScript = redis.NewScript(ownerHolds + `redis.call('HSET', key, 'state', ARGV[2], 'status', ARGV[3], 'header', ARGV[4], 'body', ARGV[5])
redis.call('HDEL', key, 'lock_until')
redis.call('PEXPIRE', key, ARGV[6])
return 1
`)

// releaseScript: KEYS[1] the key; ARGV[1] owner token. Returns 1 when the key
// was deleted, 0 when the owner does not hold it.
var releaseScript = redis.NewScript(ownerHolds + `redis.call('DEL', key)
return 1
`)
