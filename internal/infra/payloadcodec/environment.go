package payloadcodec

import "github.com/entityflow/entityflow/internal/infra/flagenv"

// Environment is what FromEnv reads, for the -h of every program that
// reaches Temporal (flagenv.Describe).
var Environment = []flagenv.Unflagged{
	{Name: KeysFileEnv, Meaning: `file of the payload keys, {"current": ID, "keys": {ID: base64 AES-256 key}}: payloads to Temporal are encrypted`},
	{Name: KeysEnv, Meaning: "the payload keys document itself, instead of " + KeysFileEnv + " (not both)"},
}
