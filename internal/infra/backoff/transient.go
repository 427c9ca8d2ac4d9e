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
// timed out. Overloaded includes a workflow at its limit of in-flight updates
// ("limit on number of concurrent in-flight updates has been reached (10)",
// ResourceExhausted with cause CONCURRENT_LIMIT) and a busy workflow
// ("Workflow is busy", cause BUSY_WORKFLOW), whatever the cause: the type
// decides, not the message. An UpdateWithStart refused as a whole
// (MultiOperationExecution) is transient when the operation that failed is.
// A workflow's own answer (an application error) is never
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
		multi      *serviceerror.MultiOperationExecution
	)
	switch {
	case err == nil, errors.As(err, &appErr):
		return false
	case errors.As(err, &notReady), errors.As(err, &unavail), errors.As(err, &exhausted),
		errors.As(err, &deadline), errors.As(err, &aborted), errors.As(err, &timeout):
		return true
	case errors.As(err, &invalidArg):
		return strings.Contains(invalidArg.Error(), "limit for signal events")
	case errors.As(err, &multi):
		return multiTransient(multi)
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// multiTransient reports whether the operations of a multi-operation request
// failed only transiently: every error but the aborted ones (aborted only
// because another operation failed) is Transient, and there is one.
func multiTransient(multi *serviceerror.MultiOperationExecution) bool {
	var aborted *serviceerror.MultiOperationAborted
	found := false
	for _, err := range multi.OperationErrors() {
		if err == nil || errors.As(err, &aborted) {
			continue
		}
		if !Transient(err) {
			return false
		}
		found = true
	}
	return found
}
