from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from channels_app.metrics import metrics_view

from .health import healthz, readyz
from .login_throttle import login_throttled

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="chat-index", permanent=False)),
    path("favicon.ico", RedirectView.as_view(url=static("qorven/favicon.svg"), permanent=True)),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/login/", login_throttled(admin.site.login)),  # before the admin's own
    path("admin/", admin.site.urls),
    path("accounts/login/", login_throttled(auth_views.LoginView.as_view(redirect_authenticated_user=True)),
         name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("v1/", include("channels_app.urls")),
    path("", include("channels_app.web_urls")),
]
