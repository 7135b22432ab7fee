package admit

import "strconv"

// Finding is one thing a policy found in a request: a violation (it denies
// the request when its policy enforces), an audit finding, or a notice.
type Finding struct {
	PolicyID string `json:"policy_id"`
	// Rule names the rule within the policy, e.g. "flavor-limit" or
	// "validations[0]".
	Rule string `json:"rule"`
	// Object is what was found at fault: an application ("application
	// \"web\" (com.example.Web)") or the environment.
	Object  string `json:"object"`
	Message string `json:"message"`
}

// Mutation is one change a policy made to a request.
type Mutation struct {
	PolicyID string `json:"policy_id"`
	Rule     string `json:"rule"`
	// Application is the name of the application changed.
	Application string `json:"application"`
	// Field is the field changed: flavor, image, instances, scripts or
	// properties.<name>.
	Field string `json:"field"`
	// Old and New are the values before and after, as JSON.
	Old string `json:"old"`
	New string `json:"new"`
}

// Verdict is the outcome of Evaluate.
type Verdict struct {
	Admitted bool `json:"admitted"`
	// Violations deny the request (policies in enforce mode).
	Violations []Finding `json:"violations"`
	// Warnings are reported without denying: violations of policies in
	// audit mode and notices.
	Warnings []Finding `json:"warnings"`
	// Mutations are the changes made, in the order they were made.
	Mutations []Mutation `json:"mutations"`
	// Request is the request as mutated.
	Request *Request `json:"request"`
	// Policies are the ids of the policies that applied, in the order
	// they were evaluated.
	Policies []string `json:"policies"`
	// Notices are the notices found (also among Warnings, or among
	// Violations for a rule that raises them as it denies: the instance
	// quota), to be sent as events.
	Notices []Notice `json:"-"`
}

// Notice is a notice's finding and where it is to be delivered.
type Notice struct {
	Finding
	// Webhook is the URL the policy delivers it to; "" none.
	Webhook string
}

// Text is the one-line text of a finding, naming the tenant, the
// object, the rule and the policy.
func (f Finding) Text(tenant string) string {
	// fmt.Sprintf("tenant %q: %s: %s (rule %s of policy %s)", ...),
	// without fmt: every audit entry's every finding is written so.
	return "tenant " + strconv.Quote(tenant) + ": " + f.Object + ": " + f.Message + " (rule " + f.Rule + " of policy " + f.PolicyID + ")"
}
