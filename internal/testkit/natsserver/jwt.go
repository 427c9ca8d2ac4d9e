package natsserver

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Operator is a decentralized (JWT) NATS setup for the tests of .creds
// credentials: an operator, a system account and an application account
// with JetStream, whose users the test creates with the permissions it
// gives them.
type Operator struct {
	// Conf is the server configuration's part for it: the operator, the
	// system account and the accounts preloaded into a memory resolver.
	Conf string
	app  nkeys.KeyPair
	dir  string
}

// NewOperator makes the operator and its two accounts.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	operator, err := nkeys.CreateOperator()
	must(err)
	opub, err := operator.PublicKey()
	must(err)
	account := func(name string, jetStream bool) (nkeys.KeyPair, string, string) {
		kp, err := nkeys.CreateAccount()
		must(err)
		pub, err := kp.PublicKey()
		must(err)
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if jetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		token, err := ac.Encode(operator)
		must(err)
		return kp, pub, token
	}
	_, sysPub, sysJWT := account("SYS", false)
	app, appPub, appJWT := account("APP", true)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "entityflow test"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(operator)
	must(err)
	conf := fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n  %s: %q\n}\n",
		opJWT, sysPub, sysPub, sysJWT, appPub, appJWT)
	return &Operator{Conf: conf, app: app, dir: t.TempDir()}
}

// User creates a user of the application account allowed to publish to pub
// and subscribe to sub (nil: everything) and returns the path of its .creds
// file.
func (o *Operator) User(t testing.TB, name string, pub, sub []string) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	uc.Pub.Allow.Add(pub...)
	uc.Sub.Allow.Add(sub...)
	token, err := uc.Encode(o.app)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(o.dir, name+".creds")
	if err := os.WriteFile(f, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
