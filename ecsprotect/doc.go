// Package ecsprotect keeps an Amazon ECS task protected from scale-in
// while its process holds work, through the ECS container agent's task
// scale-in protection endpoint.
//
// # What it protects
//
// While at least one message is held (Protector.Acquire without its
// Release, counted across every Consumer of the process that shares the
// Protector: protection is one per task), the task is marked protected by
// a PUT of {"ProtectionEnabled": true, "ExpiresInMinutes": N} to
// $ECS_AGENT_URI/task-protection/v1/state. AWS documents the effect:
// during that time the task is not terminated by scale-in events from
// service Auto Scaling or from deployments. The Protector renews the
// protection at half of N while busy, clears it with
// {"ProtectionEnabled": false} once nothing has been held for the quiet
// period, and clears it at Close, which the owner calls after the
// Consumers have drained.
//
// # What it does not protect
//
// Protection holds off the service scheduler's choice of a task to stop
// when the service scales in or deploys, and AWS documents nothing else.
// It does not hold off a Fargate Spot interruption, an EC2 instance's
// termination, a task stopped by hand (StopTask, the console), a task
// replaced because it is unhealthy, or the process's own crash. When ECS does stop the
// task, the SIGTERM → stopTimeout → SIGKILL sequence applies as usual: the
// Consumer's shutdown timeout (WithShutdownTimeout) must still fit within
// the container's stopTimeout, and Close needs up to one call timeout more.
//
// A deployment waits for protected tasks: a task that stays busy for hours
// holds its deployment for hours (at most ExpiresInMinutes after the
// process stops renewing). That is the point, and the reason
// ExpiresInMinutes should not be larger than needed.
//
// # Requirements on ECS
//
// The task must belong to a service (a standalone task's call fails with
// the reason TASK_NOT_VALID), and its task role must allow
// ecs:UpdateTaskProtection (and ecs:GetTaskProtection for the agent's GET).
// The agent injects ECS_AGENT_URI into every container of the task.
//
// # No agent, a failing agent
//
// Without ECS_AGENT_URI (and without WithAgentURI) New still returns a
// working Protector: it counts what is held, makes no calls, reports
// Stats.Available false, and logs once at WARN, at Start, that protection
// is unavailable. A process can therefore enable protection everywhere and
// run unchanged off ECS.
//
// A failing agent (refused connection, timeout, an "error" or "failure"
// answer, a non-2xx status) is never fatal and never delays Acquire or
// Release: every call runs on the Protector's own goroutine, bounded by the
// call timeout. The first failure is logged at WARN, later ones at most
// once per five minutes with the number of failures since; all are counted
// in Stats. A failed enable or renewal is retried after 1 s, doubling up to
// one minute, while still busy; a failed clear is retried the same way
// while still idle, until the protection would have lapsed by itself
// (ExpiresInMinutes after the last enable). A clear that failed may still
// have landed, so a task that becomes busy again is enabled again.
//
// # The agent's API
//
// As documented by AWS ("Protect your Amazon ECS tasks from being
// terminated by scale-in events" and "Amazon ECS task scale-in protection
// endpoint"):
//
//	https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html
//	https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html
//	https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_UpdateTaskProtection.html
//
// Request (PUT, Content-Type application/json): ProtectionEnabled (boolean,
// required) and ExpiresInMinutes (integer 1 to 2,880; 120 when omitted).
// Answers, all JSON objects:
//
//	{"protection": {"ExpirationDate": "2022-10-06T02:29:16Z", "ProtectionEnabled": true, "TaskArn": "arn:..."}}
//	{"failure": {"Arn": "arn:...", "Detail": null, "Reason": "TASK_NOT_VALID"}}
//	{"requestID": "...", "error": {"Arn": "arn:...", "Code": "AccessDeniedException", "Message": "..."}}
//
// The guide gives no status codes; the agent's source
// (github.com/aws/amazon-ecs-agent) answers a "failure" with status 200, so
// the Protector reads the body whatever the status, and an "error" with a
// 4xx or 5xx status (for
// instance RequestCanceled when the agent cannot reach ECS, or
// ThrottlingException). Both become an *AgentError.
//
// # Calls it makes
//
// With the defaults (ExpiresInMinutes 60, renewal at half of it), a
// steadily busy task costs 2 calls an hour, plus one to enable and one to
// clear around each busy stretch. The quiet period (2 minutes by default)
// keeps a trickle from flapping the protection: a task that receives a
// message at least every two minutes stays protected and costs those 2
// calls an hour, instead of two calls a message.
//
// # Kubernetes
//
// Kubernetes has no equivalent of the agent's endpoint: a Deployment's
// scale-in deletes pods, and the pod's grace period is what protects the
// work in flight. Set the pod's terminationGracePeriodSeconds to at least
// the Consumer's shutdown timeout plus this package's call timeout (plus
// any preStop hook), so the drain finishes before SIGKILL, and make the
// readiness probe fail during the drain so nothing routes to a pod on its
// way out. A Protector without ECS_AGENT_URI does nothing there, at the
// cost of one WARN line.
package ecsprotect
