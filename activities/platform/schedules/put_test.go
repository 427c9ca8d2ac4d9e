package schedules

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/workflows/platform"
)

// described returns the schedule Describe gives back after opts was created:
// Args as payloads, the workflow as its type name.
func described(t *testing.T, opts client.ScheduleOptions) client.Schedule {
	t.Helper()
	action := *opts.Action.(*client.ScheduleWorkflowAction)
	payload, err := converter.GetDefaultDataConverter().ToPayload(action.Args[0])
	require.NoError(t, err)
	action.Args = []any{payload}
	return client.Schedule{
		Action: &action,
		Spec:   &client.ScheduleSpec{TimeZoneName: opts.Spec.TimeZoneName},
		Policy: &client.SchedulePolicies{Overlap: opts.Overlap, CatchupWindow: opts.CatchupWindow},
		State:  &client.ScheduleState{Paused: true, Note: "incident 42"},
	}
}

func TestIsCurrent(t *testing.T) {
	def := cronDefinition(uuid.NewString(), "0 9 * * 1-5", "Europe/Berlin", contracts.MisfireCatchup, 3)
	opts, err := Options(def, time.Now())
	require.NoError(t, err)

	tests := []struct {
		name   string
		change func(*client.Schedule)
		want   bool
	}{
		{"same", func(*client.Schedule) {}, true},
		{"other definition", func(s *client.Schedule) {
			other := withDefaults(def)
			other.Name = "renamed"
			payload, err := converter.GetDefaultDataConverter().ToPayload(platform.FireInput{Definition: other})
			require.NoError(t, err)
			s.Action.(*client.ScheduleWorkflowAction).Args = []any{payload}
		}, false},
		{"other time zone", func(s *client.Schedule) { s.Spec.TimeZoneName = "UTC" }, false},
		{"other overlap", func(s *client.Schedule) { s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP }, false},
		{"other catchup window", func(s *client.Schedule) { s.Policy.CatchupWindow = time.Minute }, false},
		{"other workflow", func(s *client.Schedule) { s.Action.(*client.ScheduleWorkflowAction).Workflow = "Other" }, false},
		{"other task queue", func(s *client.Schedule) { s.Action.(*client.ScheduleWorkflowAction).TaskQueue = "rewards" }, false},
		{"other timeout", func(s *client.Schedule) { s.Action.(*client.ScheduleWorkflowAction).WorkflowExecutionTimeout = 0 }, false},
		{"no fairness key (created before fairness keys)", func(s *client.Schedule) {
			s.Action.(*client.ScheduleWorkflowAction).Priority = temporal.Priority{}
		}, false},
		{"no policy", func(s *client.Schedule) { s.Policy = nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := described(t, opts)
			tt.change(&s)
			assert.Equal(t, tt.want, isCurrent(s, opts, nil))
		})
	}
}

// sealing is a stand-in for an encrypting payload codec: each encoding of
// the same payload differs (a fresh nonce), as AES-GCM's does.
type sealing struct{ n byte }

func (c *sealing) Encode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		data, err := p.Marshal()
		if err != nil {
			return nil, err
		}
		c.n++
		out[i] = &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("binary/sealed")}, Data: append([]byte{c.n}, data...)}
	}
	return out, nil
}

func (c *sealing) Decode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		out[i] = &commonpb.Payload{}
		if err := out[i].Unmarshal(p.GetData()[1:]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// A schedule whose argument the client's codec encrypted is current when its
// content is, though no two encryptions have the same bytes.
func TestIsCurrentReadsAnEncryptedArgument(t *testing.T) {
	def := cronDefinition(uuid.NewString(), "0 9 * * *", "UTC", contracts.MisfireSkip, 0)
	opts, err := Options(def, time.Now())
	require.NoError(t, err)
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), &sealing{})
	s := described(t, opts)
	action := s.Action.(*client.ScheduleWorkflowAction)
	sealed, err := dc.ToPayload(opts.Action.(*client.ScheduleWorkflowAction).Args[0])
	require.NoError(t, err)
	action.Args = []any{sealed}
	assert.True(t, isCurrent(s, opts, dc), "with the client's converter")
	assert.False(t, isCurrent(s, opts, nil), "without it the argument cannot be read")
	other := withDefaults(def)
	other.Name = "renamed"
	otherSealed, err := dc.ToPayload(platform.FireInput{Definition: other})
	require.NoError(t, err)
	action.Args = []any{otherSealed}
	assert.False(t, isCurrent(s, opts, dc), "another definition")
}

func TestReplacedKeepsState(t *testing.T) {
	opts, err := Options(cronDefinition(uuid.NewString(), "* * * * *", "", contracts.MisfireSkip, 0), time.Now())
	require.NoError(t, err)
	current := described(t, opts)
	current.Policy.PauseOnFailure = true

	got := replaced(current, opts)
	assert.Equal(t, &client.ScheduleState{Paused: true, Note: "incident 42"}, got.State)
	assert.Equal(t, &client.SchedulePolicies{Overlap: opts.Overlap, CatchupWindow: opts.CatchupWindow, PauseOnFailure: true}, got.Policy)
	assert.Equal(t, &opts.Spec, got.Spec)
	assert.Equal(t, opts.Action, got.Action)
}
