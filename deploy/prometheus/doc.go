// Package prometheus holds entityflow's Prometheus rules (entityflow.rules.yml:
// the API's SLO ratios and the alerts of every program) and their promtool
// unit tests (*_test.yml). Its Go tests run `promtool check rules` and
// `promtool test rules` on them and check that every alert links a runbook
// section of docs/operations.md and has unit tests that show it firing and
// not firing. The package has no Go code of its own: the YAML files are what
// Prometheus loads.
package prometheus
