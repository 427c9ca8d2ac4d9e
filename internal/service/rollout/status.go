package rollout

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// Report is where a deployment's routing stands and where the running rewards
// entities run. Entity counts come from visibility, one count at a time, so
// they lag the executions by a moment and need not add up exactly while
// entities move.
type Report struct {
	Deployment string `json:"deployment"`
	// CurrentBuildID is the current version's build ID: new entities start on
	// it. Empty when there is none (unversioned workers take new workflows).
	CurrentBuildID string `json:"current_build_id"`
	// RampingBuildID takes RampingPercentage of the new entities instead.
	RampingBuildID    string  `json:"ramping_build_id,omitempty"`
	RampingPercentage float32 `json:"ramping_percentage,omitempty"`
	// RoutingPropagating says the last routing change has not reached every
	// task queue yet.
	RoutingPropagating bool `json:"routing_propagating"`
	// Versions are the deployment's versions, newest first.
	Versions []VersionReport `json:"versions"`
	// Running counts the running rewards entities, Unversioned those on no
	// version, NotOnCurrent those on neither the current version nor the
	// ramping one (the unversioned included): the ones Nudge would wake.
	Running      int64 `json:"running"`
	Unversioned  int64 `json:"unversioned"`
	NotOnCurrent int64 `json:"not_on_current"`
}

// VersionReport is one Worker Deployment Version: its status, its drainage,
// and the running rewards entities on it.
type VersionReport struct {
	BuildID string `json:"build_id"`
	// Status is the server's: inactive (never current or ramping), current,
	// ramping, draining (no longer either, with Pinned workflows possibly
	// still on it), drained (none left: its workers can stop).
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	// DrainageCheckedAt is when the server last counted the version's running
	// Pinned workflows, DrainageChangedAt when the drainage status last
	// changed; nil until it starts draining.
	DrainageCheckedAt *time.Time `json:"drainage_checked_at,omitempty"`
	DrainageChangedAt *time.Time `json:"drainage_changed_at,omitempty"`
	// Entities counts the running rewards entities on the version.
	Entities int64 `json:"entities"`
}

// Status reports on deployment: its routing, every version with its status
// and drainage, and the running rewards entities per version.
func Status(ctx context.Context, c client.Client, deployment string) (Report, error) {
	if err := ValidateDeployment(deployment); err != nil {
		return Report{}, err
	}
	desc, err := describe(ctx, c, deployment)
	if err != nil {
		return Report{}, err
	}
	r := report(deployment, desc)
	count := func(query string) (int64, error) {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err != nil {
			return 0, fmt.Errorf("counting entities (%s): %w", query, err)
		}
		return resp.GetCount(), nil
	}
	if r.Running, err = count(runningEntities); err != nil {
		return r, err
	}
	if r.Unversioned, err = count(unversionedQuery()); err != nil {
		return r, err
	}
	if r.NotOnCurrent, err = count(notOnCurrentQuery(deployment, r.CurrentBuildID, r.RampingBuildID)); err != nil {
		return r, err
	}
	for i := range r.Versions {
		if r.Versions[i].Entities, err = count(onVersionQuery(deployment, r.Versions[i].BuildID)); err != nil {
			return r, err
		}
	}
	return r, nil
}

// report is the routing and versions part of a Report, from the server's
// description of the deployment.
func report(deployment string, desc *workflowservice.DescribeWorkerDeploymentResponse) Report {
	info := desc.GetWorkerDeploymentInfo()
	routing := info.GetRoutingConfig()
	r := Report{
		Deployment:         deployment,
		CurrentBuildID:     routing.GetCurrentDeploymentVersion().GetBuildId(),
		RampingBuildID:     routing.GetRampingDeploymentVersion().GetBuildId(),
		RoutingPropagating: info.GetRoutingConfigUpdateState() == enums.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS,
		Versions:           []VersionReport{},
	}
	if r.RampingBuildID != "" {
		r.RampingPercentage = routing.GetRampingVersionPercentage()
	}
	for _, v := range info.GetVersionSummaries() {
		vr := VersionReport{
			BuildID:   v.GetDeploymentVersion().GetBuildId(),
			Status:    strings.ToLower(v.GetStatus().String()),
			CreatedAt: v.GetCreateTime().AsTime().UTC(),
		}
		if d := v.GetDrainageInfo(); d.GetStatus() != enums.VERSION_DRAINAGE_STATUS_UNSPECIFIED {
			checked, changed := d.GetLastCheckedTime().AsTime().UTC(), d.GetLastChangedTime().AsTime().UTC()
			vr.DrainageCheckedAt, vr.DrainageChangedAt = &checked, &changed
		}
		r.Versions = append(r.Versions, vr)
	}
	return r
}

// Text is the report for a person: the routing, a table of the versions
// with their entities, and how many entities are not on the current version.
func (r Report) Text() string {
	var b strings.Builder
	current := r.CurrentBuildID
	if current == "" {
		current = "none (unversioned)"
	}
	fmt.Fprintf(&b, "Worker Deployment %s: current version %s", r.Deployment, current)
	if r.RampingBuildID != "" {
		fmt.Fprintf(&b, ", ramping %s at %v%%", r.RampingBuildID, r.RampingPercentage)
	}
	if r.RoutingPropagating {
		b.WriteString(" (routing change still propagating)")
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BUILD ID\tSTATUS\tENTITIES\tCREATED\tDRAINAGE CHECKED")
	for _, v := range r.Versions {
		checked := "-"
		if v.DrainageCheckedAt != nil {
			checked = v.DrainageCheckedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", v.BuildID, v.Status, v.Entities, v.CreatedAt.Format(time.RFC3339), checked)
	}
	fmt.Fprintf(tw, "(unversioned)\t-\t%d\t-\t-\n", r.Unversioned)
	_ = tw.Flush() // writes to a strings.Builder, which does not fail
	which := "not on the current version"
	if r.RampingBuildID != "" {
		which += " nor on the ramping one"
	}
	fmt.Fprintf(&b, "\n%d running entities, %d %s\n", r.Running, r.NotOnCurrent, which)
	return b.String()
}
