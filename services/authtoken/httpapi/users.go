package httpapi

import (
	"context"
	"errors"

	"github.com/danielgtaylor/huma/v2"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/authtoken"
)

// roleName is a role in a request; its schema lists the roles, so an unknown one is a 422
// naming its position.
type roleName string

// Schema implements huma.SchemaProvider.
func (roleName) Schema(huma.Registry) *huma.Schema {
	return &huma.Schema{Type: huma.TypeString, Enum: []any{"admin", "observer", "viewer", "service"}, Description: "A role."}
}

type userListInput struct {
	Limit    int    `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size."`
	Offset   int    `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
	Q        string `query:"q" maxLength:"255" doc:"Only users whose username, email or display name contains this (case-insensitive)."`
	Role     string `query:"role" enum:"admin,observer,viewer,service" doc:"Only users holding this role."`
	IsActive string `query:"is_active" enum:"true,false" doc:"Only active (true) or disabled (false) users."`
}

type userAuditInput struct {
	Limit  int   `query:"limit" default:"50" minimum:"1" maximum:"500" doc:"Page size."`
	Offset int   `query:"offset" default:"0" minimum:"0" doc:"Items to skip."`
	UserID int64 `query:"user_id" minimum:"1" doc:"Only the entries of this user."`
}

type userIDInput struct {
	ID int64 `path:"id" minimum:"1" doc:"User id."`
}

// userUpdateBody is the body of PUT /api/users/{id}: every field optional, at least one given.
type userUpdateBody struct {
	Roles    []roleName `json:"roles,omitempty" maxItems:"4" doc:"The complete new role set, replacing the old one ([] removes every role)." example:"[\"observer\",\"viewer\"]"`
	IsActive *bool      `json:"is_active,omitempty" doc:"false disables the user: none of their credentials verifies anywhere within 5 s, and session JWTs issued before stay refused after re-enabling; true enables."`
}

// identityBody is the body of PUT /api/users/{id}/identity.
type identityBody struct {
	Issuer  string `json:"issuer" minLength:"1" maxLength:"2048" doc:"The identity provider's issuer URL, as in its ID tokens (iss)." example:"https://idp.example.org"`
	Subject string `json:"subject" minLength:"1" maxLength:"255" doc:"The account's subject at that provider (sub)." example:"248289761001"`
	Move    bool   `json:"move,omitempty" doc:"When the identity is linked to another account (e.g. the one a first login made under name-2), take it from there instead of answering 409."`
}

type identityInput struct {
	ID   int64 `path:"id" minimum:"1" doc:"User id."`
	Body identityBody
}

type userUpdateInput struct {
	ID   int64 `path:"id" minimum:"1" doc:"User id."`
	Body userUpdateBody
}

// userProblem turns a user service error into its problem response.
func (h *Handlers) userProblem(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, problem.ErrNotFound):
		return huma.Error404NotFound("no user with this id")
	case errors.Is(err, authtoken.ErrServiceAccountLogin):
		return huma.Error409Conflict("service accounts cannot be linked to an identity-provider account: they never log in")
	case errors.Is(err, authtoken.ErrIdentityConflict):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, authtoken.ErrLastAdmin):
		return huma.Error409Conflict("the last active admin cannot be disabled or lose the admin role: make another user admin first")
	}
	return h.tokenProblem(ctx, "user "+op, err) // input and forbidden errors are shared
}

func (h *Handlers) listUsers(ctx context.Context, in *userListInput) (*bodyOutput[authtoken.Page[authtoken.User]], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	q := authtoken.UserListQuery{Q: in.Q, Role: in.Role, Limit: in.Limit, Offset: in.Offset}
	if in.IsActive != "" {
		active := in.IsActive == "true"
		q.Active = &active
	}
	page, err := h.Users.List(ctx, caller, q)
	if err != nil {
		return nil, h.userProblem(ctx, "list", err)
	}
	return out(page), nil
}

func (h *Handlers) getUser(ctx context.Context, in *userIDInput) (*bodyOutput[authtoken.User], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	u, err := h.Users.Get(ctx, caller, in.ID)
	if err != nil {
		return nil, h.userProblem(ctx, "get", err)
	}
	return out(u), nil
}

func (h *Handlers) updateUser(ctx context.Context, in *userUpdateInput) (*bodyOutput[authtoken.User], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	ch := authtoken.UserChanges{Active: in.Body.IsActive}
	if in.Body.Roles != nil {
		roles := make([]string, len(in.Body.Roles))
		for i, r := range in.Body.Roles {
			roles[i] = string(r)
		}
		ch.Roles = &roles
	}
	u, err := h.Users.Update(ctx, caller, in.ID, ch)
	if err != nil {
		return nil, h.userProblem(ctx, "update", err)
	}
	return out(u), nil
}

func (h *Handlers) linkIdentity(ctx context.Context, in *identityInput) (*bodyOutput[authtoken.User], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	u, err := h.Users.LinkIdentity(ctx, caller, in.ID, in.Body.Issuer, in.Body.Subject, in.Body.Move)
	if err != nil {
		return nil, h.userProblem(ctx, "link identity", err)
	}
	return out(u), nil
}

func (h *Handlers) userAuditLog(ctx context.Context, in *userAuditInput) (*bodyOutput[authtoken.Page[authtoken.UserAuditEntry]], error) {
	caller, err := tokenCaller(ctx)
	if err != nil {
		return nil, err
	}
	page, err := h.Users.AuditLog(ctx, caller, authtoken.UserAuditQuery{UserID: in.UserID, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, h.userProblem(ctx, "audit", err)
	}
	return out(page), nil
}
