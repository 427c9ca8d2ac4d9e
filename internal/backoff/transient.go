package backoff

import (
	"context"
	"errors"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
)

// Transient reports whether a call to Temporal failed in a way the server
// asks callers to retry: the server unavailable, overloaded or too slow, a
// workflow not ready (an update landing while a ContinueAsNew is retried), an
// aborted request, a signal refused at the per-run signal limit, a try that
// timed out. A workflow's own answer (an application error) is never
// transient here; callers that know a retryable one say so themselves.
func Transient(err error) bool {
	var (
		appErr     *temporal.ApplicationError
		notReady   *serviceerror.WorkflowNotReady
		unavail    *serviceerror.Unavailable
		exhausted  *serviceerror.ResourceExhausted
		deadline   *serviceerror.DeadlineExceeded
		aborted    *serviceerror.Aborted
		invalidArg *serviceerror.InvalidArgument
		timeout    *temporal.TimeoutError
	)
	switch {
	case err == nil, errors.As(err, &appErr):
		return false
	case errors.As(err, &notReady), errors.As(err, &unavail), errors.As(err, &exhausted),
		errors.As(err, &deadline), errors.As(err, &aborted), errors.As(err, &timeout):
		return true
	case errors.As(err, &invalidArg):
		return strings.Contains(invalidArg.Error(), "limit for signal events")
	}
	return errors.Is(err, context.DeadlineExceeded)
}
