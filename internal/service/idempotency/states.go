package idempotency

import (
	"crypto/rand"
	"encoding/hex"
)

// The states a KeyStore keeps a key in, as the Redis and SQL stores write
// them. A released or expired key is absent.
const (
	// StateInProgress: a request owns the key and has not finished.
	StateInProgress = "in_progress"
	// StateCompleted: the request finished with a status below 400.
	StateCompleted = "completed"
	// StateFailedFinal: the request finished with a status of 400 or more, a
	// failure that retrying the same request cannot fix; it is replayed too.
	StateFailedFinal = "failed_final"
)

// FinalState is the state KeyStore.Complete leaves a key in for a response
// with the given status: StateCompleted below 400, StateFailedFinal from 400.
func FinalState(status int) string {
	if status >= 400 {
		return StateFailedFinal
	}
	return StateCompleted
}

// NewOwnerToken returns a fresh owner token for a claim: 128 random bits
// (crypto/rand) in hex, so a holder cannot guess another's token and tokens
// never repeat in practice.
func NewOwnerToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b[:])
}
