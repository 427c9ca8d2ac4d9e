package main

import (
	"flag"
	"maps"

	"github.com/entityflow/entityflow/internal/infra/flagenv"
	"github.com/entityflow/entityflow/internal/service/rollout"
)

// environment names, by command, the environment variable of each flag that
// has one; the entry "" is every command's. A flag given on the command line
// beats its variable, which beats the flag's default. The same flag name may
// have a variable in one command and none in another: -tenant is TENANT_ID
// for the rewards commands, never for apikey.
var environment = map[string]flagenv.Vars{
	"": {
		"address":   "TEMPORAL_ADDRESS",
		"namespace": "TEMPORAL_NAMESPACE",
	},
	"points":           {"tenant": "TENANT_ID"},
	"status":           {"tenant": "TENANT_ID"},
	"enroll":           {"tenant": "TENANT_ID"},
	"unenroll":         {"tenant": "TENANT_ID"},
	"define":           {"database-url": "DATABASE_URL"},
	"event":            {"database-url": "DATABASE_URL"},
	"run":              {"database-url": "DATABASE_URL"},
	"schedules":        {"database-url": "DATABASE_URL"},
	"apikey":           {"database-url": "DATABASE_URL"},
	"deploy":           {"deployment": rollout.DeploymentEnv},
	"deadletters list": deadLettersEnv,
	"deadletters replay": merge(deadLettersEnv, flagenv.Vars{
		"ingest-points-durable": "INGEST_POINTS_DURABLE",
		"ingest-events-durable": "INGEST_EVENTS_DURABLE",
		"ingest-replay-stream":  "INGEST_REPLAY_STREAM",
		"ingest-replay-prefix":  "INGEST_REPLAY_PREFIX",
	}),
	"serve": {
		"http-addr":            "HTTP_ADDR",
		"database-url":         "DATABASE_URL",
		"idempotency-store":    "IDEMPOTENCY_STORE",
		"idempotency-ttl":      "IDEMPOTENCY_TTL",
		"idempotency-lock-ttl": "IDEMPOTENCY_LOCK_TTL",
		"entity-max-inflight":  "ENTITY_MAX_INFLIGHT",
		"entity-max-queue":     "ENTITY_MAX_QUEUE",
		"entity-max-wait":      "ENTITY_MAX_WAIT",
		"entity-batch-after":   "ENTITY_BATCH_AFTER",
		"log-level":            "LOG_LEVEL",
		"tls-cert":             "HTTP_TLS_CERT",
		"tls-key":              "HTTP_TLS_KEY",
		"codec-cors-origin":    "CODEC_CORS_ORIGIN",
		"oidc-issuer":          "OIDC_ISSUER",
		"oidc-jwks-url":        "OIDC_JWKS_URL",
		"oidc-audience":        "OIDC_AUDIENCE",
		"oidc-tenant-claim":    "OIDC_TENANT_CLAIM",
		"oidc-scope-claim":     "OIDC_SCOPE_CLAIM",
		"tenant-rate":          "TENANT_RATE",
		"tenant-burst":         "TENANT_BURST",
		"apikey-cache-ttl":     "APIKEY_CACHE_TTL",
		"trusted-proxies":      "TRUSTED_PROXIES",
		"metrics-token":        "HTTP_METRICS_TOKEN",
	},
}

// deadLettersEnv is the environment of the deadletters commands: the bus's
// and the dead-letter stream's, the worker's variables.
var deadLettersEnv = flagenv.Vars{
	"nats-url":                  "NATS_URL",
	"nats-ca":                   "NATS_CA",
	"nats-cert":                 "NATS_CERT",
	"nats-key":                  "NATS_KEY",
	"nats-creds":                "NATS_CREDS",
	"nats-nkey":                 "NATS_NKEY",
	"nats-user":                 "NATS_USER",
	"nats-password":             "NATS_PASSWORD",
	"nats-token":                "NATS_TOKEN",
	"ingest-dead-letter-stream": "INGEST_DEAD_LETTER_STREAM",
	"ingest-dead-letter-prefix": "INGEST_DEAD_LETTER_PREFIX",
}

// merge returns the variables of a and b in one table.
func merge(a, b flagenv.Vars) flagenv.Vars {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// parseFlags parses the command line of command into fs, over the
// environment variables of the global flags and of the command's.
func parseFlags(fs *flag.FlagSet, command string, args []string) error {
	return flagenv.Parse(fs, args, environment[""], environment[command])
}

// serveFlag names a flag of serve in a message, with its environment
// variable: "-tenant-burst (or TENANT_BURST)".
func serveFlag(name string) string {
	return "-" + name + " (or " + environment["serve"][name] + ")"
}
