package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
)

// apikeyUsage lists the apikey subcommands.
const apikeyUsage = `usage: starter apikey create -tenant T -scopes S1,S2 [-name N]
       starter apikey revoke -id ID
       starter apikey list [-tenant T]`

// apikeyCommand manages the HTTP API's keys in the database of
// -database-url: create prints a new key once, revoke ends one, list shows
// them without secrets. None needs Temporal.
func apikeyCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(apikeyUsage)
	}
	switch args[0] {
	case "create":
		return apikeyCreate(ctx, fs, g, args[1:], out)
	case "revoke":
		return apikeyRevoke(ctx, fs, g, args[1:], out)
	case "list":
		return apikeyList(ctx, fs, g, args[1:], out)
	default:
		return fmt.Errorf("unknown apikey command %q\n%s", args[0], apikeyUsage)
	}
}

// openKeyDatabase opens the database of the API keys, bounded by -timeout;
// the returned func closes both.
func (g globals) openKeyDatabase(ctx context.Context, databaseURL string) (context.Context, *store.Store, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, *g.timeout)
	st, err := store.Open(ctx, databaseURL)
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("opening database: %w", err)
	}
	return ctx, st, func() { st.Close(); cancel() }, nil
}

// createdKey is what apikey create -json prints: the stored key and, once,
// its token.
type createdKey struct {
	store.APIKey
	Key string `json:"key"`
}

func apikeyCreate(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	tenantID := fs.String("tenant", "", "the `tenant` every request with the key acts for (required)")
	scopeList := fs.String("scopes", "", "what the key may do, comma-separated: "+strings.Join(auth.AllScopes, ",")+" (required)")
	name := fs.String("name", "", "a `label` for people, such as the client service's name")
	dbURL := databaseFlag(fs)
	if err := parseFlags(fs, "apikey", args); err != nil {
		return err
	}
	if *tenantID == "" {
		return errors.New("-tenant is required")
	}
	if err := tenant.Validate(*tenantID); err != nil {
		return fmt.Errorf("-tenant: %w", err)
	}
	scopes, err := auth.ParseScopes(*scopeList)
	if err != nil {
		return fmt.Errorf("-scopes: %w", err)
	}
	ctx, st, done, err := g.openKeyDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer done()
	key, token, err := st.CreateAPIKey(ctx, store.NewAPIKey{TenantID: *tenantID, Scopes: scopes, Name: *name})
	if err != nil {
		return err
	}
	return print(out, *g.asJSON, createdKey{APIKey: key, Key: token},
		fmt.Sprintf("created API key %s for tenant %s, scopes %s\n%s\nThis is the only time the key is shown: the database keeps its hash only. Send it as Authorization: Bearer <key>.",
			key.ID, key.TenantID, strings.Join(key.Scopes, ","), token))
}

func apikeyRevoke(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	id := fs.String("id", "", "the key's `id` (apikey list shows it; the part after efk_ up to the next _)")
	dbURL := databaseFlag(fs)
	if err := parseFlags(fs, "apikey", args); err != nil {
		return err
	}
	if *id == "" {
		return errors.New("-id is required")
	}
	ctx, st, done, err := g.openKeyDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer done()
	revoked, err := st.RevokeAPIKey(ctx, *id, time.Time{})
	if err != nil {
		return err
	}
	key, err := st.GetAPIKey(ctx, *id)
	if err != nil {
		return err
	}
	text := fmt.Sprintf("revoked API key %s of tenant %s; a server that verified it recently accepts it for up to its -apikey-cache-ttl more (default %s)",
		key.ID, key.TenantID, auth.DefaultCacheTTL)
	if !revoked {
		text = fmt.Sprintf("API key %s of tenant %s was already revoked at %s", key.ID, key.TenantID, key.RevokedAt.Format(time.RFC3339))
	}
	return print(out, *g.asJSON, struct {
		store.APIKey
		Revoked bool `json:"revoked_now"`
	}{key, revoked}, text)
}

func apikeyList(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	tenant := fs.String("tenant", "", "list this `tenant`'s keys only")
	dbURL := databaseFlag(fs)
	if err := parseFlags(fs, "apikey", args); err != nil {
		return err
	}
	ctx, st, done, err := g.openKeyDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer done()
	keys, err := st.ListAPIKeys(ctx, *tenant)
	if err != nil {
		return err
	}
	if *g.asJSON {
		return print(out, true, keys, "")
	}
	if len(keys) == 0 {
		_, err := fmt.Fprintln(out, "no API keys")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tSCOPES\tNAME\tCREATED\tREVOKED")
	for _, k := range keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.TenantID, strings.Join(k.Scopes, ","), orDash(k.Name), k.CreatedAt.Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}

// orDash is s, or "-" when it is empty, for a table cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
