"""A binding's webhook secret is one of its credentials (Telegram's `secret`, Slack's
`signing_secret`…), entered with the others: the separate `webhook_secret` column was
never read or written, and a secret typed into it by hand would have checked nothing."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('channels_app', '0014_binding_verify_key'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='channelbinding',
            name='webhook_secret',
        ),
    ]
