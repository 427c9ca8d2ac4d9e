package ingress

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// PartitionRoot is the first token of the subject a point event is stored
// under in its stream: the stream's subject transform stores a message
// published on {prefix}.{tenant}.{customer}.points as
// partition.{p}.{prefix}.{tenant}.{customer}.points, p being its partition.
// Outside {prefix}.>, so that the subjects of messages stored before the
// stream was partitioned (which keep their published subject) never match a
// partition's filter.
const PartitionRoot = "partition"

// DefaultPartitions is how many partitions a points stream the ingress
// creates (or partitions) has, and so how many ingress processes can share
// its point events.
const DefaultPartitions = 8

// MaxPartitions bounds Config.Partitions.
const MaxPartitions = 1024

// PartitionOf returns the partition of a point event published on subject,
// out of n: FNV-1a (32 bits) of the whole subject modulo n, as nats-server's
// {{partition(n)}} mapping computes it. A customer's subject, and so all its
// events, always land in the same partition.
func PartitionOf(subject string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(subject))
	return int(h.Sum32() % uint32(n))
}

// StoredPointsSubject returns the subject a point event published on
// subject is stored under in a stream of n partitions.
func StoredPointsSubject(subject string, n int) string {
	return PartitionRoot + "." + strconv.Itoa(PartitionOf(subject, n)) + "." + subject
}

// PublishedSubject returns the subject a stored point event was published
// on, and its partition: the stored subject without its partition tokens.
// A subject stored before its stream was partitioned is its published one
// (partition -1).
func PublishedSubject(stored string) (subject string, partition int) {
	rest, ok := strings.CutPrefix(stored, PartitionRoot+".")
	if !ok {
		return stored, -1
	}
	p, subject, ok := strings.Cut(rest, ".")
	n, err := strconv.Atoi(p)
	if !ok || err != nil || n < 0 || strconv.Itoa(n) != p {
		return stored, -1
	}
	return subject, n
}

// pointsTransform is the subject transform of a points stream with n
// partitions: {prefix}.> stored as partition.{{partition(n)}}.{prefix}.>
// (the shorthand partition(n) hashes the whole subject, so a customer ID
// holding dots, several tokens, is hashed whole).
func pointsTransform(prefix string, n int) *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      prefix + ".>",
		Destination: fmt.Sprintf("%s.{{partition(%d)}}.%s.>", PartitionRoot, n, prefix),
	}
}

// partitionsFunc reads n out of a {{partition(n)}} mapping function.
var partitionsFunc = regexp.MustCompile(`^\{\{\s*[pP]artition\s*\(\s*(\d+)\s*\)\s*\}\}$`)

// transformPartitions reads the number of partitions out of a points
// stream's subject transform, if it is the one pointsTransform makes for
// prefix.
func transformPartitions(tr *jetstream.SubjectTransformConfig, prefix string) (int, bool) {
	if tr == nil || tr.Source != prefix+".>" {
		return 0, false
	}
	rest, ok := strings.CutPrefix(tr.Destination, PartitionRoot+".")
	if !ok {
		return 0, false
	}
	fn, tail, ok := strings.Cut(rest, ".")
	if !ok || tail != prefix+".>" {
		return 0, false
	}
	m := partitionsFunc.FindStringSubmatch(fn)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// partitionFilter is the filter subject of partition p's consumer.
func partitionFilter(prefix string, p int) string {
	return PartitionRoot + "." + strconv.Itoa(p) + "." + prefix + ".>"
}

// partitionDurable is the name of partition p's durable consumer.
func partitionDurable(durable string, p int) string {
	return durable + "-" + strconv.Itoa(p)
}

// StoredSubject returns the subject a message published on published is
// stored under in the stream of cfg: its partition subject in a points
// stream the ingress partitioned (its subject transform), published itself
// otherwise.
func StoredSubject(cfg jetstream.StreamConfig, published string) string {
	tr := cfg.SubjectTransform
	if tr == nil {
		return published
	}
	prefix, ok := strings.CutSuffix(tr.Source, ".>")
	if !ok || !strings.HasPrefix(published, prefix+".") {
		return published
	}
	n, ok := transformPartitions(tr, prefix)
	if !ok {
		return published
	}
	return StoredPointsSubject(published, n)
}
