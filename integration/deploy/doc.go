// Package deploy checks the deployment files in deploy/ against the code:
// every service of services/ has its compose service and Kubernetes
// Deployment, and every image is built FROM scratch.
package deploy
