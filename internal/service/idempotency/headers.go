package idempotency

// The request and response headers the layer reads and writes.
const (
	// KeyHeader carries the client's idempotency key on commands.
	KeyHeader = "Idempotency-Key"
	// TenantHeader names the tenant a request acts for (default "default").
	TenantHeader = "X-Tenant-ID"
	// ReplayedHeader marks a response replayed from the key store.
	ReplayedHeader = "Idempotent-Replayed"
)
