using System;
using System.IO;
using System.Linq;
using System.Xml;
using Xunit;

namespace LockingCenter.Tests
{
    /// <summary>
    /// The package's project file, read as MSBuild reads it: what a .NET user gets from `dotnet pack`
    /// (this machine has no .NET SDK, so the pack itself is not run here; test.sh compiles the same
    /// sources with mcs, once per API surface).
    /// </summary>
    public class ProjectFileTests
    {
        private static string Folder()
        {
            for (var d = new DirectoryInfo(AppDomain.CurrentDomain.BaseDirectory); d != null; d = d.Parent)
                if (File.Exists(Path.Combine(d.FullName, "src", "LockingCenter", "LockingCenter.csproj"))) return d.FullName;
            throw new FileNotFoundException("clients/csharp not found above " + AppDomain.CurrentDomain.BaseDirectory);
        }

        private static string Property(XmlDocument project, string name)
        {
            XmlNode e = project.SelectSingleNode("//" + name);
            return e == null ? null : e.InnerText.Trim();
        }

        [Fact]
        public void TheProjectFileHasTheMetadataAPackageNeeds()
        {
            string folder = Folder();
            string path = Path.Combine(folder, "src", "LockingCenter", "LockingCenter.csproj");
            var p = new XmlDocument();
            p.Load(path);
            Assert.Equal("Microsoft.NET.Sdk", p.DocumentElement.GetAttribute("Sdk"));
            Assert.Equal("LockingCenter.Client", Property(p, "PackageId"));
            Assert.Equal("MIT", Property(p, "PackageLicenseExpression"));
            Assert.Equal("https://github.com/locking-center/locking-center", Property(p, "RepositoryUrl"));
            Assert.Equal("https://github.com/locking-center/locking-center", Property(p, "PackageProjectUrl"));
            Assert.Equal("git", Property(p, "RepositoryType"));
            Assert.Equal("The Locking-Center authors", Property(p, "Authors"));
            Assert.True(Property(p, "Description").Length > 40, "a description");
            Assert.Equal("README.md", Property(p, "PackageReadmeFile"));
            Assert.Equal("netstandard2.0;netstandard2.1", Property(p, "TargetFrameworks"));
            string version = Property(p, "Version");
            Assert.True(System.Text.RegularExpressions.Regex.IsMatch(version, @"^\d+\.\d+\.\d+$"), "version " + version);
            // The README packed beside it is the one the install section names this version in.
            var readme = (XmlElement)p.SelectSingleNode("//None[@PackagePath='\\']");
            string readmePath = Path.Combine(Path.GetDirectoryName(path), readme.GetAttribute("Include").Replace('\\', Path.DirectorySeparatorChar));
            Assert.True(File.ReadAllText(readmePath).Contains("Version=\"" + version + "\""), "the README installs version " + version);
            Assert.True(File.Exists(Path.Combine(folder, "..", "..", "LICENSE")), "the repository's LICENSE");
        }
    }
}
