package tenant

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxFairnessKeyBytes is the longest fairness key Temporal accepts.
const MaxFairnessKeyBytes = 64

// FairnessKey returns the task-queue fairness key of tenantID's workflows
// (temporal.Priority.FairnessKey): the tenant ID, Default for an
// empty one, so that a server with fairness enabled shares each task queue's
// dispatch among tenants rather than in arrival order. A tenant ID longer
// than MaxFairnessKeyBytes (tenant IDs may have MaxBytes) keeps its
// first 47 bytes followed by '~' and 16 hex digits of its SHA-256, unique in
// practice and the same on every call.
func FairnessKey(tenantID string) string {
	key := Normalize(tenantID)
	if len(key) <= MaxFairnessKeyBytes {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return key[:MaxFairnessKeyBytes-17] + "~" + hex.EncodeToString(sum[:8])
}
