// Package deploy holds no code. Its tests are the CI checks of the
// deployment files: the Dockerfile and .dockerignore, docker-compose.yml,
// the Kubernetes manifests in kubernetes/ and the Prometheus configuration
// in prometheus/ are parsed with the tools that will read them in
// production and checked against each other and against the real server
// (its defaults, its routes, its healthcheck subcommand, its persistence
// across a restart). docker-compose.yml is also run for real, on podman
// with podman-compose, with the image built from the Dockerfile; the
// Kubernetes manifests are validated against the API's OpenAPI schemas.
//
// It is a module of its own so that compose-go, the Kubernetes API types,
// kustomize and BuildKit's Dockerfile parser stay out of the server's go.mod.
package deploy
