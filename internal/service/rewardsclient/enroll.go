package rewardsclient

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// Enroll enrolls the customer through the entity's enroll update, starting the
// entity if none runs (UpdateWithStart). It is the explicit re-enrollment after
// an unenrollment, which nothing else undoes, and changes nothing for a customer
// who is enrolled, so calling it twice is calling it once. It returns the
// entity's status afterwards. An entity still ending an unenrollment answers
// Unenrolling, which is retried until it has ended and a new one can start.
func (c *Client) Enroll(ctx context.Context, customerID string) (rewards.Status, error) {
	if err := c.validate(customerID); err != nil {
		return rewards.Status{}, err
	}
	var st rewards.Status
	updateID := uuid.NewString()
	err := c.retry(ctx, "enroll", func(ctx context.Context) error {
		return c.updateWithStartOnce(ctx, customerID, rewards.UpdateEnroll, updateID, nil, &st)
	})
	if err != nil {
		return rewards.Status{}, fmt.Errorf("enrolling %s: %w", customerID, err)
	}
	return st, nil
}
