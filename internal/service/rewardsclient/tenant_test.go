package rewardsclient_test

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// addressedTemporal records the workflow ID every command is addressed to
// and the start input of every command that may start the entity.
type addressedTemporal struct {
	client.Client
	ids    []string
	inputs []rewards.RewardsInput
	// fairness holds the fairness key of every start.
	fairness []string
}

func (f *addressedTemporal) start(opts client.StartWorkflowOptions, args []any) {
	f.ids = append(f.ids, opts.ID)
	f.inputs = append(f.inputs, args[0].(rewards.RewardsInput))
	f.fairness = append(f.fairness, opts.Priority.FairnessKey)
}

func (f *addressedTemporal) NewWithStartWorkflowOperation(opts client.StartWorkflowOptions, _ any, args ...any) client.WithStartWorkflowOperation {
	f.start(opts, args)
	return nil
}

func (f *addressedTemporal) UpdateWithStartWorkflow(_ context.Context, opts client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.ids = append(f.ids, opts.UpdateOptions.WorkflowID)
	return anyHandle{}, nil
}

func (f *addressedTemporal) SignalWithStartWorkflow(_ context.Context, id, _ string, _ any, opts client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	f.ids = append(f.ids, id)
	f.start(opts, args)
	return nil, nil
}

func (f *addressedTemporal) SignalWorkflow(_ context.Context, id, _, _ string, _ any) error {
	f.ids = append(f.ids, id)
	return nil
}

func (f *addressedTemporal) QueryWorkflow(_ context.Context, id, _, _ string, _ ...any) (converter.EncodedValue, error) {
	f.ids = append(f.ids, id)
	return nil, errors.New("no answer: the test looks at the address only")
}

// anyHandle is the handle of an update whose answer the test ignores.
type anyHandle struct{ client.WorkflowUpdateHandle }

func (anyHandle) Get(context.Context, any) error { return nil }

// Every command goes to the entity of the client's tenant's customer, and a
// new entity is started with that tenant and the tenant's fairness key; the
// default tenant's entities keep their IDs and inputs. A client made For another tenant leaves the
// original alone.
func TestCommandsAddressTheTenantsEntity(t *testing.T) {
	tests := []struct {
		tenant, wantID, wantTenant, wantFairness string
	}{
		{"", "rewards-c-1", "", "default"},
		{tenant.Default, "rewards-c-1", "", "default"},
		{"t-1", "rewards/t-1/c-1", "t-1", "t-1"},
	}
	for _, tt := range tests {
		t.Run(tenant.Normalize(tt.tenant), func(t *testing.T) {
			fake := &addressedTemporal{}
			base := &rewardsclient.Client{Temporal: fake, Attempts: 1}
			c := base.For(tt.tenant)
			ctx := context.Background()
			ev := rewards.PointEvent{DedupKey: "k-1", Points: 5}
			if _, err := c.ApplyPoints(ctx, "c-1", ev); err != nil {
				t.Fatal(err)
			}
			if err := c.AddPoints(ctx, "c-1", ev); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Enroll(ctx, "c-1"); err != nil {
				t.Fatal(err)
			}
			if err := c.Unenroll(ctx, "c-1"); err != nil {
				t.Fatal(err)
			}
			_, _ = c.Status(ctx, "c-1")
			if len(fake.ids) != 8 {
				t.Fatalf("%d addressed commands %v, want 8", len(fake.ids), fake.ids)
			}
			for _, id := range fake.ids {
				if id != tt.wantID {
					t.Fatalf("commands addressed to %v, want all to %s", fake.ids, tt.wantID)
				}
			}
			for _, in := range fake.inputs {
				if in.CustomerID != "c-1" || in.TenantID != tt.wantTenant {
					t.Fatalf("start input %+v, want customer c-1 of tenant %q", in, tt.wantTenant)
				}
			}
			if len(fake.fairness) == 0 {
				t.Fatal("no command could start the entity")
			}
			for _, k := range fake.fairness {
				if k != tt.wantFairness {
					t.Fatalf("starts with fairness keys %q, want all %q", fake.fairness, tt.wantFairness)
				}
			}
			if base.Tenant != "" {
				t.Fatalf("For changed the original client's tenant to %q", base.Tenant)
			}
		})
	}
}

// A tenant ID that breaks the contracts' rule is refused before anything is
// sent: it would make another tenant's workflow ID.
func TestInvalidTenantIsRefused(t *testing.T) {
	for _, tenant := range []string{"t/1", "-t", "t:1"} {
		fake := &addressedTemporal{}
		c := (&rewardsclient.Client{Temporal: fake}).For(tenant)
		if _, err := c.Status(context.Background(), "c-1"); err == nil || len(fake.ids) != 0 {
			t.Errorf("tenant %q: %v after %d commands, want an error and none sent", tenant, err, len(fake.ids))
		}
	}
}
