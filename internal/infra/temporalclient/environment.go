package temporalclient

import (
	"slices"

	"github.com/entityflow/entityflow/internal/infra/flagenv"
	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
)

// Environment is what Options reads from the environment besides
// TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE (which the programs' -address and
// -namespace stand for): the SDK's environment configuration
// (envconfig.LoadDefaultClientOptions) and the payload keys, for the -h of
// every program that reaches Temporal (flagenv.Describe).
var Environment = slices.Concat([]flagenv.Unflagged{
	{Name: "TEMPORAL_API_KEY", Meaning: "API key sent to Temporal (Temporal Cloud); turns TLS on unless TEMPORAL_TLS=false"},
	{Name: "TEMPORAL_TLS", Meaning: "true: TLS to Temporal; false: none, even with an API key or a TEMPORAL_TLS_* file (default: TLS when one is set)"},
	{Name: "TEMPORAL_TLS_CLIENT_CERT_PATH", Meaning: "PEM client certificate file, for mutual TLS to Temporal"},
	{Name: "TEMPORAL_TLS_CLIENT_CERT_DATA", Meaning: "the PEM client certificate itself, instead of its file"},
	{Name: "TEMPORAL_TLS_CLIENT_KEY_PATH", Meaning: "PEM private key file of the client certificate"},
	{Name: "TEMPORAL_TLS_CLIENT_KEY_DATA", Meaning: "the PEM private key itself, instead of its file"},
	{Name: "TEMPORAL_TLS_SERVER_CA_CERT_PATH", Meaning: "PEM CA certificate file that Temporal's server certificate must chain to (default: the system's roots)"},
	{Name: "TEMPORAL_TLS_SERVER_CA_CERT_DATA", Meaning: "the PEM CA certificate itself, read over the file; refused without TEMPORAL_TLS_SERVER_CA_CERT_PATH (an SDK bug)"},
	{Name: "TEMPORAL_TLS_SERVER_NAME", Meaning: "name Temporal's server certificate must carry (default: the host of the address)"},
	{Name: "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", Meaning: "true: accept any server certificate from Temporal (never in production)"},
	{Name: "TEMPORAL_GRPC_META_*", Meaning: "a gRPC header sent with every Temporal request: TEMPORAL_GRPC_META_X_TEAM=a sends x-team: a"},
	{Name: "TEMPORAL_CONFIG_FILE", Meaning: "TOML file of Temporal client profiles (default: temporalio/temporal.toml in the user's config directory, if there)"},
	{Name: "TEMPORAL_PROFILE", Meaning: "profile of that file to use (default: default); the variables above override it"},
}, payloadcodec.Environment)
